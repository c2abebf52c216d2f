// Live device writes: app launch, track event, identify, push token, logout. Each runs to the end
// at once, so writes reach a device actor strictly in arrival order.
import { detail } from '../schemas/details.ts';
import type { DeviceRecord } from '../journal/records.ts';
import type { AppLaunch, Identify, Logout, PushToken, TrackEvent } from '../schemas/endpoints.ts';
import { launchAnswer, SUCCESS_BODY, type Acceptor, type Reply } from './acceptor.ts';
import { DeviceActor } from './device-actor.ts';
import { newId } from './ids.ts';
import type { Workspace } from './workspace.ts';

export class DeviceWrites {
  constructor(private readonly acceptor: Acceptor) {}

  /** The active device `did` names, or null after refusing the write (unknown or logged out). */
  private activeDevice(ws: Workspace, did: string, reply: Reply): DeviceActor | null {
    const device = ws.devices.get(did);
    const problem = DeviceActor.checkActive(device, did);
    if (problem === null && device !== undefined) return device;
    this.acceptor.refuse([problem ?? detail.deviceNotFound(did)], reply);
    return null;
  }

  /** A did not in use in this workspace (a collision of 21 random characters is only theoretical). */
  private newDid(ws: Workspace): string {
    let did = newId();
    while (ws.devices.has(did)) did = newId();
    return did;
  }

  // Each write first asks whether it is a retry of one already accepted (Idempotency-Key).

  appLaunch(ws: Workspace, body: AppLaunch, at: number, reply: Reply): void {
    if (this.acceptor.retried(reply, true)) return;
    const sent = body.did;
    const known = typeof sent === 'string' ? ws.devices.get(sent) : undefined;
    const device = known !== undefined && !known.loggedOut ? known : undefined;
    const did = device !== undefined ? device.did : this.newDid(ws);
    const sid = newId();
    const customer = device !== undefined ? device.customerId : null;
    this.acceptor.accept({ kind: 'app_launch', workspace: ws.name, at, did, sid, customer, data: body }, reply, launchAnswer(did, sid));
  }

  trackEvent(ws: Workspace, body: TrackEvent, at: number, reply: Reply): void {
    if (this.acceptor.retried(reply)) return;
    const device = this.activeDevice(ws, body.did, reply);
    if (device !== null) this.acceptFor(ws, device, 'event', body, device.customerId, at, reply);
  }

  identify(ws: Workspace, body: Identify, at: number, reply: Reply): void {
    if (this.acceptor.retried(reply)) return;
    const device = this.activeDevice(ws, body.did, reply);
    if (device !== null) this.acceptFor(ws, device, 'identify', body, body.clientCustomerId ?? device.customerId, at, reply);
  }

  pushToken(ws: Workspace, body: PushToken, at: number, reply: Reply): void {
    if (this.acceptor.retried(reply)) return;
    const device = this.activeDevice(ws, body.did, reply);
    if (device !== null) this.acceptFor(ws, device, 'push_token', body, device.customerId, at, reply);
  }

  /** Logout needs a known did; logging out twice answers 200 (and is journaled like any write). */
  logout(ws: Workspace, body: Logout, at: number, reply: Reply): void {
    if (this.acceptor.retried(reply)) return;
    const device = ws.devices.get(body.did);
    if (device === undefined) return this.acceptor.refuse([detail.deviceNotFound(body.did)], reply);
    this.acceptFor(ws, device, 'logout', body, device.customerId, at, reply);
  }

  /** Journals a write to an existing device: its record carries the device's did and session. */
  private acceptFor<R extends DeviceRecord>(ws: Workspace, device: DeviceActor, kind: R['kind'], data: R['data'], customer: string | null, at: number, reply: Reply): void {
    const record = { kind, workspace: ws.name, at, did: device.did, sid: device.sid, customer, data } as DeviceRecord;
    this.acceptor.accept(record, reply, SUCCESS_BODY);
  }
}
