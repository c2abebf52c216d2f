// A frame (frames.ts) as bytes, for the one place it crosses a network: a follower forwarding
// writes to the leader. Threads post the frame itself. Layout, little-endian:
//   u32 origin length, origin (UTF-8), u32 text length, text (UTF-8), u32 blob count,
//   then per blob: u32 length, bytes.
// The origin names the sender (a follower's node name and process), so command ids, unique per
// sender, are unique on the leader.
import { FrameError, type Frame } from './frames.ts';

/** A forwarded frame is at most this big: the largest batch body plus its commands' fields. */
export const MAX_WIRE_BYTES = 64 * 1024 * 1024;

export function frameToBytes(origin: string, frame: Frame): Buffer {
  const originBytes = Buffer.from(origin, 'utf8');
  const text = Buffer.from(frame.text, 'utf8');
  let size = 4 + originBytes.length + 4 + text.length + 4;
  for (const blob of frame.blobs) size += 4 + blob.length;
  const out = Buffer.allocUnsafe(size);
  let at = out.writeUInt32LE(originBytes.length, 0);
  at += originBytes.copy(out, at);
  at = out.writeUInt32LE(text.length, at);
  at += text.copy(out, at);
  at = out.writeUInt32LE(frame.blobs.length, at);
  for (const blob of frame.blobs) {
    at = out.writeUInt32LE(blob.length, at);
    out.set(blob, at);
    at += blob.length;
  }
  return out;
}

export function frameFromBytes(bytes: Buffer): { origin: string; frame: Frame } {
  let at = 0;
  const take = (length: number): Buffer => {
    if (at + length > bytes.length) throw new FrameError('a forwarded frame is cut short');
    const part = bytes.subarray(at, at + length);
    at += length;
    return part;
  };
  const u32 = (): number => take(4).readUInt32LE(0);
  const origin = take(u32()).toString('utf8');
  const text = take(u32()).toString('utf8');
  const count = u32();
  if (count > 1_000_000) throw new FrameError('too many blobs in a forwarded frame');
  const blobs: Uint8Array[] = [];
  for (let i = 0; i < count; i++) blobs.push(take(u32()));
  if (at !== bytes.length) throw new FrameError('bytes after the end of a forwarded frame');
  return { origin, frame: { text, blobs } };
}
