// One actor per device: the only owner of that device's state. Every change goes through an
// `apply*` method, fed either by a live write (after its reference checks passed) or by journal
// replay, so both produce exactly the same state. Messages run to completion on the one JS
// thread in arrival order, so two writes to a device are never interleaved. Each apply method
// tells the change tracker first, so a snapshot in progress can keep the state it had at its
// journal position (change-tracker.ts).
import type { LaunchInfoValue } from '../schemas/endpoints.ts';
import { detail, type ValidationDetail } from '../schemas/details.ts';
import type { AttributeBag, AttributeEntryInput } from './attributes.ts';
import { mergeAttributes } from './attributes.ts';
import type { ChangeTracker } from './change-tracker.ts';
import type { Customer } from './customer.ts';

export interface PushTokens {
  fcm?: string;
  apns?: string;
}

/**
 * What a device holds only once it identified, got a push token or logged out. Most devices
 * only ever launch: keeping these four fields apart makes such a device 5 fields (64 bytes)
 * instead of 8 (88 bytes), about a tenth of its memory with its two ids and its map entry.
 */
class DeviceExtras {
  customer: Customer | null = null;
  anonymous: AttributeBag | null = null;
  tokens: PushTokens | null = null;
  loggedOut = false;
}

export class DeviceActor {
  readonly did: string;
  sid: string;
  /** The latest launch info (interned, shared between devices with the same profile). */
  profile: LaunchInfoValue;
  /** Snapshot epoch: see change-tracker.ts. */
  snapEpoch: number;
  private extras: DeviceExtras | null = null;

  constructor(did: string, sid: string, profile: LaunchInfoValue, epoch: number) {
    this.did = did;
    this.sid = sid;
    this.profile = profile;
    this.snapEpoch = epoch;
  }

  private more(): DeviceExtras {
    return (this.extras ??= new DeviceExtras());
  }

  get customer(): Customer | null {
    return this.extras === null ? null : this.extras.customer;
  }

  set customer(customer: Customer | null) {
    if (customer !== null || this.extras !== null) this.more().customer = customer;
  }

  /** Attributes identified without a customer id while the device had no customer. */
  get anonymous(): AttributeBag | null {
    return this.extras === null ? null : this.extras.anonymous;
  }

  set anonymous(bag: AttributeBag | null) {
    if (bag !== null || this.extras !== null) this.more().anonymous = bag;
  }

  get tokens(): PushTokens | null {
    return this.extras === null ? null : this.extras.tokens;
  }

  set tokens(tokens: PushTokens | null) {
    if (tokens !== null || this.extras !== null) this.more().tokens = tokens;
  }

  get loggedOut(): boolean {
    return this.extras !== null && this.extras.loggedOut;
  }

  set loggedOut(loggedOut: boolean) {
    if (loggedOut || this.extras !== null) this.more().loggedOut = loggedOut;
  }

  /** The reference check of track, identify and push token: the device must be active. */
  static checkActive(device: DeviceActor | undefined, did: string): ValidationDetail | null {
    if (device === undefined) return detail.deviceNotFound(did);
    if (device.loggedOut) return detail.deviceLoggedOut(did);
    return null;
  }

  get customerId(): string | null {
    const customer = this.customer;
    return customer === null ? null : customer.id;
  }

  applyLaunch(tracker: ChangeTracker, sid: string, profile: LaunchInfoValue): void {
    tracker.beforeChange(this);
    this.sid = sid;
    this.profile = profile;
  }

  /** Links to `customer` when given, then merges `info` into the customer or the anonymous profile. */
  applyIdentify(tracker: ChangeTracker, customer: Customer | null, info: readonly AttributeEntryInput[] | undefined): void {
    tracker.beforeChange(this);
    if (customer !== null) this.customer = customer;
    if (info === undefined || info.length === 0) return;
    const linked = this.customer;
    if (linked !== null) linked.applyMerge(tracker, info);
    else mergeAttributes((this.more().anonymous ??= new Map()), info);
  }

  applyPushToken(tracker: ChangeTracker, type: 'fcm' | 'apns', token: string): void {
    tracker.beforeChange(this);
    (this.more().tokens ??= {})[type] = token;
  }

  applyLogout(tracker: ChangeTracker): void {
    tracker.beforeChange(this);
    this.loggedOut = true;
  }
}
