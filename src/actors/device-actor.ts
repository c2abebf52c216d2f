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

export class DeviceActor {
  readonly did: string;
  sid: string;
  /** The latest launch info (interned, shared between devices with the same profile). */
  profile: LaunchInfoValue;
  customer: Customer | null = null;
  /** Attributes identified without a customer id while the device had no customer. */
  anonymous: AttributeBag | null = null;
  tokens: PushTokens | null = null;
  loggedOut = false;
  /** Snapshot epoch: see change-tracker.ts. */
  snapEpoch: number;

  constructor(did: string, sid: string, profile: LaunchInfoValue, epoch: number) {
    this.did = did;
    this.sid = sid;
    this.profile = profile;
    this.snapEpoch = epoch;
  }

  /** The reference check of track, identify and push token: the device must be active. */
  static checkActive(device: DeviceActor | undefined, did: string): ValidationDetail | null {
    if (device === undefined) return detail.deviceNotFound(did);
    if (device.loggedOut) return detail.deviceLoggedOut(did);
    return null;
  }

  get customerId(): string | null {
    return this.customer === null ? null : this.customer.id;
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
    if (this.customer !== null) this.customer.applyMerge(tracker, info);
    else mergeAttributes((this.anonymous ??= new Map()), info);
  }

  applyPushToken(tracker: ChangeTracker, type: 'fcm' | 'apns', token: string): void {
    tracker.beforeChange(this);
    (this.tokens ??= {})[type] = token;
  }

  applyLogout(tracker: ChangeTracker): void {
    tracker.beforeChange(this);
    this.loggedOut = true;
  }
}
