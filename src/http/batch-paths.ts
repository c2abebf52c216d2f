// Which route a batch item's method and path name, answered as uWebSockets.js's router answers
// the same request alone: the query string is ignored, static parts match exactly (no decoding,
// no case folding, no trailing slash), `:id` is one non-empty path segment, then percent-decoded
// (a malformed escape: 404). A known path with another method is 405; anything else is 404.
// (Checked against the real router: see test/batch-property.test.ts, which compares each item
// with the same request sent alone.)
import { ERRORS, type ErrorSpec } from './errors.ts';
import type { WriteRoute } from './pending-request.ts';
import { decodeParam } from './path-param.ts';

export type ItemTarget =
  | { route: WriteRoute; param: string; error: null; message: undefined }
  | { route: null; param: ''; error: ErrorSpec; message: string | undefined };

interface Pattern {
  /** The route, or null for a path that only answers 405 here (GET endpoints, /batch). */
  route: WriteRoute | null;
  method: string;
  /** The whole pattern, or the part before `:id`. */
  prefix: string;
  /** The part after `:id`; null for a pattern without one. */
  suffix: string | null;
}

const fail = (error: ErrorSpec, message?: string): ItemTarget => ({ route: null, param: '', error, message });

export const NESTED_BATCH = 'a batch item cannot be a batch';

export class ItemRouter {
  private readonly patterns: Pattern[] = [];

  /** `routes`: the write routes; `otherPaths`: paths of other endpoints (an item on them is 405). */
  constructor(routes: readonly WriteRoute[], otherPaths: readonly string[]) {
    for (const route of routes) {
      const at = route.pattern.indexOf(':id');
      const method = route.method === 'del' ? 'DELETE' : 'POST';
      if (at === -1) this.patterns.push({ route, method, prefix: route.pattern, suffix: null });
      else this.patterns.push({ route, method, prefix: route.pattern.slice(0, at), suffix: route.pattern.slice(at + 3) });
    }
    for (const path of otherPaths) this.patterns.push({ route: null, method: '', prefix: path, suffix: null });
  }

  resolve(method: string, rawPath: string, batchPath: string): ItemTarget {
    const query = rawPath.indexOf('?');
    const path = query === -1 ? rawPath : rawPath.slice(0, query);
    let known = false;
    for (const p of this.patterns) {
      let param = '';
      if (p.suffix === null) {
        if (path !== p.prefix) continue;
      } else {
        const end = path.length - p.suffix.length;
        if (end <= p.prefix.length || !path.startsWith(p.prefix) || !path.endsWith(p.suffix)) continue;
        param = path.slice(p.prefix.length, end);
        if (param.includes('/')) continue;
      }
      known = true;
      if (p.route === null || p.method !== method) continue;
      const decoded = decodeParam(param);
      if (decoded === null) return fail(ERRORS.notFound, 'malformed percent-encoding in the path');
      return { route: p.route, param: decoded, error: null, message: undefined };
    }
    // POST /batch alone is a batch; inside one it is refused (404), the other items go on.
    if (path === batchPath && method === 'POST') return fail(ERRORS.notFound, NESTED_BATCH);
    return known || path === batchPath ? fail(ERRORS.methodNotAllowed) : fail(ERRORS.notFound);
  }
}
