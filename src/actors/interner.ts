// Interning for device profiles: most devices share a handful of launch profiles and many more
// share their strings (manufacturer, OS version, language), so devices point at one copy.
// Both tables are bounded; when one fills it starts over, which costs only lost sharing for new
// devices (the old copies stay alive through the devices that use them).
import { LaunchInfo, type LaunchInfoValue } from '../schemas/endpoints.ts';

const MAX_STRINGS = 200_000;
const MAX_PROFILES = 100_000;
/**
 * Characters of the strings the caches hold, at most, each: a cache that is full by this is
 * emptied as one full by count is. By count alone a launch with a unique 2,048-character referrer
 * each kept up to about 400 MB of strings no device used any more (found by a review).
 */
export const MAX_CACHED_CHARS = 8 * 1024 * 1024;
/** The most profiles kept under one hash: a launch compares with at most this many. */
const MAX_BUCKET = 8;

type Fields = Record<string, unknown>;

/** One step of FNV-1a (32 bits). */
const mix = (h: number, x: number): number => Math.imul(h ^ x, 0x01000193);

function mixValue(h: number, v: unknown): number {
  if (typeof v === 'string') {
    for (let i = 0; i < v.length; i++) h = mix(h, v.charCodeAt(i));
    return mix(h, 0x73);
  }
  // Any other value mixes in a little of itself; equal profiles hash alike, and sameProfile decides.
  return mix(h, typeof v === 'number' ? v | 0 : v === true ? 0x74 : v === false ? 0x66 : v === undefined ? 0x75 : 0x6e);
}

const def = (v: unknown): number => (v === undefined ? 0 : 1);

/** Enumerable keys, own or inherited. */
function keyCount(o: object): number {
  let n = 0;
  for (const _ in o) n++;
  return n;
}

/**
 * A hash of the profile's values, or -1 when it holds keys other than LaunchInfo's (the schema
 * would not let those through; such a profile is interned by its JSON text instead).
 */
function profileHash(info: Fields): number {
  // LaunchInfo's fields (the schema is closed) by name: a loop over their names would make every
  // load a megamorphic keyed one.
  const i = info as Partial<LaunchInfoValue>;
  let h = mixValue(0x811c9dc5 | 0, i.appVersionCode);
  h = mixValue(h, i.appVersionName);
  h = mixValue(h, i.sdkVersion);
  h = mixValue(h, i.firstTime);
  h = mixValue(h, i.deviceType);
  h = mixValue(h, i.deviceManufacturer);
  h = mixValue(h, i.deviceModel);
  h = mixValue(h, i.deviceCarrier);
  h = mixValue(h, i.osName);
  h = mixValue(h, i.osVersion);
  h = mixValue(h, i.platform);
  h = mixValue(h, i.language);
  h = mixValue(h, i.referrer);
  let present =
    def(i.appVersionCode) + def(i.appVersionName) + def(i.sdkVersion) + def(i.firstTime) + def(i.deviceType) + def(i.deviceManufacturer) + def(i.deviceModel) +
    def(i.deviceCarrier) + def(i.osName) + def(i.osVersion) + def(i.platform) + def(i.language) + def(i.referrer);
  const utm = info.utmInfo;
  if (utm !== undefined) {
    if (utm === null || typeof utm !== 'object' || Array.isArray(utm)) return -1;
    present++;
    const u = utm as Fields;
    if (keyCount(u) !== (u.us === undefined ? 0 : 1) + (u.um === undefined ? 0 : 1) + (u.uc === undefined ? 0 : 1)) return -1;
    h = mixValue(mixValue(mixValue(mix(h, 0x6f), u.us), u.um), u.uc);
  }
  if (keyCount(info) !== present) return -1;
  // Kept within V8's small integers, so the Map key is never a boxed number.
  return h & 0x3fffffff;
}

/** Equal values field by field; both hold LaunchInfo's keys only (profileHash checked). */
function sameProfile(a: Partial<LaunchInfoValue>, b: Partial<LaunchInfoValue>): boolean {
  if (
    a.appVersionCode !== b.appVersionCode ||
    a.appVersionName !== b.appVersionName ||
    a.sdkVersion !== b.sdkVersion ||
    a.firstTime !== b.firstTime ||
    a.deviceType !== b.deviceType ||
    a.deviceManufacturer !== b.deviceManufacturer ||
    a.deviceModel !== b.deviceModel ||
    a.deviceCarrier !== b.deviceCarrier ||
    a.osName !== b.osName ||
    a.osVersion !== b.osVersion ||
    a.platform !== b.platform ||
    a.language !== b.language ||
    a.referrer !== b.referrer
  ) {
    return false;
  }
  const ua = a.utmInfo;
  const ub = b.utmInfo;
  if (ua === undefined || ub === undefined) return ua === ub;
  return ua.us === ub.us && ua.um === ub.um && ua.uc === ub.uc;
}

export class ProfileInterner {
  private strings = new Map<string, string>();
  /**
   * Profiles by the hash of their values (issue 19: a JSON.stringify key per launch was a launch's
   * most expensive step of its own, ~1.4 µs with its hashing; this is a few hundred ns, keeps no
   * key strings, and the same fields in another order share a profile). Profiles whose hashes
   * collide share an array of at most MAX_BUCKET.
   */
  private profiles = new Map<number, LaunchInfoValue | LaunchInfoValue[]>();
  /** Profiles with keys LaunchInfo does not have (not from a validated body), by their JSON. */
  private odd = new Map<string, LaunchInfoValue>();
  private count = 0;
  /** Characters of the cached profiles' strings, and of the cached strings (MAX_CACHED_CHARS). */
  private profileChars = 0;
  private stringChars = 0;

  /** Characters of the strings both caches hold (what they keep alive beyond what devices use). */
  get cachedChars(): number {
    return this.profileChars + this.stringChars;
  }

  intern(info: LaunchInfoValue): LaunchInfoValue {
    const fields = info as unknown as Fields;
    const h = profileHash(fields);
    if (h < 0) return this.internOdd(info);
    const known = this.profiles.get(h);
    if (known !== undefined) {
      if (!Array.isArray(known)) {
        if (sameProfile(known, info)) return known;
      } else {
        for (const p of known) if (sameProfile(p, info)) return p;
      }
    }
    const profile = this.internStrings(info);
    if (this.count >= MAX_PROFILES || this.profileChars >= MAX_CACHED_CHARS) this.forgetProfiles();
    const current = this.profiles.get(h);
    if (current === undefined) this.profiles.set(h, profile);
    // A full bucket (profiles made to collide) keeps what it has: the new one is not shared.
    else if (!Array.isArray(current)) this.profiles.set(h, [current, profile]);
    else if (current.length < MAX_BUCKET) current.push(profile);
    else return profile;
    this.count++;
    this.profileChars += charsOf(profile);
    return profile;
  }

  private internOdd(info: LaunchInfoValue): LaunchInfoValue {
    const key = JSON.stringify(info);
    const known = this.odd.get(key);
    if (known !== undefined) return known;
    const profile = this.internStrings(info);
    if (this.count >= MAX_PROFILES || this.profileChars >= MAX_CACHED_CHARS) this.forgetProfiles();
    this.count++;
    this.profileChars += key.length;
    this.odd.set(key, profile);
    return profile;
  }

  private forgetProfiles(): void {
    this.profiles = new Map();
    this.odd = new Map();
    this.count = 0;
    this.profileChars = 0;
  }

  private internString(s: string): string {
    const known = this.strings.get(s);
    if (known !== undefined) return known;
    if (this.strings.size >= MAX_STRINGS || this.stringChars >= MAX_CACHED_CHARS) {
      this.strings = new Map();
      this.stringChars = 0;
    }
    this.strings.set(s, s);
    this.stringChars += s.length;
    return s;
  }

  /**
   * A frozen copy with shared strings, its keys in LaunchInfo's order (any others after, in their
   * own): devices share a profile whatever order its keys came in, so the copy kept must not
   * keep one client's order. It did, and a device's exported profile listed its keys in the order
   * of whichever launch the cache held, which a restart (loading the snapshot's profiles) changed
   * (found by a review, 2026-11-29).
   */
  private internStrings(info: LaunchInfoValue): LaunchInfoValue {
    const out: Record<string, unknown> = {};
    for (const [k, v] of inSchemaOrder(info as unknown as Fields, LAUNCH_KEYS)) {
      if (typeof v === 'string') out[k] = this.internString(v);
      else if (k === 'utmInfo' && v !== null && typeof v === 'object') {
        const utm: Record<string, string | null> = {};
        for (const [uk, uv] of inSchemaOrder(v as Fields, UTM_KEYS)) {
          utm[uk] = typeof uv === 'string' ? this.internString(uv) : (uv as string | null);
        }
        out[k] = Object.freeze(utm);
      } else out[k] = v;
    }
    return Object.freeze(out) as LaunchInfoValue;
  }
}

const LAUNCH_KEYS: readonly string[] = Object.keys(LaunchInfo.properties);
const UTM_KEYS: readonly string[] = Object.keys(LaunchInfo.properties.utmInfo.properties);

/** `fields`' entries: the keys of `order` first, in that order, then any others in their own. */
function inSchemaOrder(fields: Fields, order: readonly string[]): Array<[string, unknown]> {
  const entries: Array<[string, unknown]> = [];
  for (const k of order) if (Object.hasOwn(fields, k)) entries.push([k, fields[k]]);
  for (const k of Object.keys(fields)) if (!order.includes(k)) entries.push([k, fields[k]]);
  return entries;
}

/** Characters of a profile's strings (its UTM values too). */
function charsOf(profile: LaunchInfoValue): number {
  let chars = 0;
  for (const v of Object.values(profile)) {
    if (typeof v === 'string') chars += v.length;
    else if (v !== null && typeof v === 'object') for (const u of Object.values(v as Record<string, unknown>)) if (typeof u === 'string') chars += u.length;
  }
  return chars;
}
