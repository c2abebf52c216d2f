// The `:id` URL parameter: decoded from the request path, and put back into its route's pattern
// to name the path an Idempotency-Key is scoped by (CONTRACT.md §10).

/** '%2F' and friends in `:id`; null when the escape sequence is malformed. */
export function decodeParam(raw: string): string | null {
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

/**
 * The route's pattern with `:id` replaced by the decoded id, exactly as sent. Not
 * String.prototype.replace with a string: it reads `$$`, `$&`, `` $` `` and `$'` in the
 * replacement as patterns, so `/product/$` and `/product/$$` named one path (found by review).
 */
export function fillParam(pattern: string, param: string): string {
  const at = pattern.indexOf(':id');
  return at === -1 ? pattern : pattern.slice(0, at) + param + pattern.slice(at + 3);
}
