// Interning for device profiles: most devices share a handful of launch profiles and many more
// share their strings (manufacturer, OS version, language), so devices point at one copy.
// Both tables are bounded; when one fills it starts over, which costs only lost sharing for new
// devices (the old copies stay alive through the devices that use them).
import type { LaunchInfoValue } from '../schemas/endpoints.ts';

const MAX_STRINGS = 200_000;
const MAX_PROFILES = 100_000;

export class ProfileInterner {
  private strings = new Map<string, string>();
  private profiles = new Map<string, LaunchInfoValue>();

  intern(info: LaunchInfoValue): LaunchInfoValue {
    const key = JSON.stringify(info);
    const known = this.profiles.get(key);
    if (known !== undefined) return known;
    const profile = this.internStrings(info);
    if (this.profiles.size >= MAX_PROFILES) this.profiles = new Map();
    this.profiles.set(key, profile);
    return profile;
  }

  private internString(s: string): string {
    const known = this.strings.get(s);
    if (known !== undefined) return known;
    if (this.strings.size >= MAX_STRINGS) this.strings = new Map();
    this.strings.set(s, s);
    return s;
  }

  private internStrings(info: LaunchInfoValue): LaunchInfoValue {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(info)) {
      if (typeof v === 'string') out[k] = this.internString(v);
      else if (k === 'utmInfo' && v !== null && typeof v === 'object') {
        const utm: Record<string, string | null> = {};
        for (const [uk, uv] of Object.entries(v as Record<string, string | null>)) {
          utm[uk] = typeof uv === 'string' ? this.internString(uv) : uv;
        }
        out[k] = Object.freeze(utm);
      } else out[k] = v;
    }
    return Object.freeze(out) as LaunchInfoValue;
  }
}
