// The command an edge sends for a valid write (handoff/frames.ts), from the request it holds:
// one place for ThreadLink (to the state thread) and LocalLink (to a sink in the same thread).
import type { Command, CommandKind } from '../handoff/frames.ts';
import type { PendingRequest } from '../http/pending-request.ts';

const NO_SCOPE: readonly [number, number, number] = [0, 0, 0];
const NO_PRINT: readonly [number, number] = [0, 0];

/** What an edge's links ask of its Authenticator: the sha256 of a key it authenticated (no new hash per write: cached). */
export interface KeyHashes {
  keyHashOf(key: string): string;
}

export function commandOf(request: PendingRequest, id: number, kind: CommandKind, text: string, bytes: Uint8Array | null, keyHash: string): Command {
  const claim = request.idempotency;
  return {
    id,
    kind,
    route: request.route.name,
    workspace: request.workspaceName,
    keyHash,
    param: request.param,
    at: request.at,
    requestId: request.requestId,
    idempotencyKey: claim === null ? '' : claim.key,
    scope: claim === null ? NO_SCOPE : [claim.h0, claim.h1, claim.h2],
    fingerprint: claim === null ? NO_PRINT : [claim.f0, claim.f1],
    gzip: request.encoding === 'gzip',
    text,
    bytes,
  };
}
