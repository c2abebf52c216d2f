// Header values the contract asks to be printable ASCII: x-request-id (CONTRACT.md §9, space
// allowed) and Idempotency-Key (§10, no space).

/** 1 to `maxLength` characters, each from `lowest` (0x20 with space, 0x21 without) to 0x7E. */
export function printableAscii(value: string, maxLength: number, lowest: 0x20 | 0x21): boolean {
  if (value.length === 0 || value.length > maxLength) return false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < lowest || c > 0x7e) return false;
  }
  return true;
}

/** An Idempotency-Key (§10): 1 to 255 printable ASCII characters (0x21 to 0x7E). The client checks its callers' keys with it too. */
export function validIdempotencyKey(key: string): boolean {
  return printableAscii(key, 255, 0x21);
}
