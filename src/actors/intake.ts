// Live writes: route a validated body to its actor, run the reference checks, then either
//  - accept: build the journal record, apply it to memory, append it to the journal; the answer
//    (200) goes out when the batch holding it is durable; or
//  - refuse: a 422 that goes out once every write it may have observed is durable.
// Everything here is synchronous, so messages reach each actor strictly in arrival order.
import type { CommitWaiter, Journal } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import { detail, type ValidationDetail } from '../schemas/details.ts';
import type {
  AppLaunch,
  Collection,
  Identify,
  Logout,
  Mapping,
  Product,
  PushToken,
  TrackEvent,
} from '../schemas/endpoints.ts';
import { applyRecord } from './apply.ts';
import { distinctIds } from './catalog-actor.ts';
import { DeviceActor } from './device-actor.ts';
import { newId } from './ids.ts';
import { ProfileInterner } from './interner.ts';
import type { Workspace, Workspaces } from './workspace.ts';

/** The HTTP side of one write: what to answer, and when (via CommitWaiter). */
export interface Reply extends CommitWaiter {
  /** The 200 body, sent once the write is durable. */
  succeed(body: string): void;
  /** A 422, sent once the writes it observed are durable. */
  reject(details: ValidationDetail[]): void;
}

export const SUCCESS_BODY = '{"success":true}';

export class Intake {
  readonly workspaces: Workspaces;
  readonly interner = new ProfileInterner();
  private readonly journal: Journal;

  constructor(workspaces: Workspaces, journal: Journal) {
    this.workspaces = workspaces;
    this.journal = journal;
  }

  private accept(record: JournalRecord, reply: Reply, body: string): void {
    applyRecord(this.workspaces, this.interner, record);
    reply.succeed(body);
    this.journal.append(record, reply);
  }

  private refuse(details: ValidationDetail[], reply: Reply): void {
    reply.reject(details);
    if (!this.journal.afterPending(reply)) reply.committed();
  }

  /** The active device `did` names, or null after refusing the write (unknown or logged out). */
  private activeDevice(ws: Workspace, did: string, reply: Reply): DeviceActor | null {
    const device = ws.devices.get(did);
    const problem = DeviceActor.checkActive(device, did);
    if (problem === null && device !== undefined) return device;
    this.refuse([problem ?? detail.deviceNotFound(did)], reply);
    return null;
  }

  /** A did not in use in this workspace (a collision of 21 random characters is only theoretical). */
  private newDid(ws: Workspace): string {
    let did = newId();
    while (ws.devices.has(did)) did = newId();
    return did;
  }

  appLaunch(ws: Workspace, body: AppLaunch, at: number, reply: Reply): void {
    const sent = body.did;
    const known = typeof sent === 'string' ? ws.devices.get(sent) : undefined;
    const device = known !== undefined && !known.loggedOut ? known : undefined;
    const did = device !== undefined ? device.did : this.newDid(ws);
    const sid = newId();
    const record: JournalRecord = {
      kind: 'app_launch',
      workspace: ws.name,
      at,
      did,
      sid,
      customer: device !== undefined ? device.customerId : null,
      data: body,
    };
    this.accept(record, reply, JSON.stringify({ did, sid }));
  }

  trackEvent(ws: Workspace, body: TrackEvent, at: number, reply: Reply): void {
    const device = this.activeDevice(ws, body.did, reply);
    if (device === null) return;
    this.accept(
      { kind: 'event', workspace: ws.name, at, did: device.did, sid: device.sid, customer: device.customerId, data: body },
      reply,
      SUCCESS_BODY,
    );
  }

  identify(ws: Workspace, body: Identify, at: number, reply: Reply): void {
    const device = this.activeDevice(ws, body.did, reply);
    if (device === null) return;
    const customer = body.clientCustomerId ?? device.customerId;
    this.accept(
      { kind: 'identify', workspace: ws.name, at, did: device.did, sid: device.sid, customer, data: body },
      reply,
      SUCCESS_BODY,
    );
  }

  pushToken(ws: Workspace, body: PushToken, at: number, reply: Reply): void {
    const device = this.activeDevice(ws, body.did, reply);
    if (device === null) return;
    this.accept(
      { kind: 'push_token', workspace: ws.name, at, did: device.did, sid: device.sid, customer: device.customerId, data: body },
      reply,
      SUCCESS_BODY,
    );
  }

  /** Logout needs a known did; logging out twice answers 200 (and is journaled like any write). */
  logout(ws: Workspace, body: Logout, at: number, reply: Reply): void {
    const device = ws.devices.get(body.did);
    if (device === undefined) return this.refuse([detail.deviceNotFound(body.did)], reply);
    this.accept(
      { kind: 'logout', workspace: ws.name, at, did: device.did, sid: device.sid, customer: device.customerId, data: body },
      reply,
      SUCCESS_BODY,
    );
  }

  productUpsert(ws: Workspace, body: Product, at: number, reply: Reply): void {
    const problems = ws.catalog.checkProductUpsert(body);
    if (problems !== null) return this.refuse(problems, reply);
    this.accept({ kind: 'product_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
  }

  /** Deleting is idempotent: a retried delete answers 200 too. */
  productDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.accept({ kind: 'product_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY);
  }

  collectionUpsert(ws: Workspace, body: Collection, at: number, reply: Reply): void {
    const problems = ws.catalog.checkCollectionUpsert(body);
    if (problems !== null) return this.refuse(problems, reply);
    this.accept({ kind: 'collection_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
  }

  collectionDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.accept({ kind: 'collection_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY);
  }

  mappingAdd(ws: Workspace, id: string, body: Mapping, at: number, reply: Reply): void {
    const problems = ws.catalog.checkMappingAdd(id, body.products);
    if (problems !== null) return this.refuse(problems, reply);
    const products = distinctIds(body.products);
    this.accept({ kind: 'collection_products_add', workspace: ws.name, at, data: { id, products } }, reply, SUCCESS_BODY);
  }

  mappingRemove(ws: Workspace, id: string, body: Mapping, at: number, reply: Reply): void {
    const problems = ws.catalog.checkMappingRemove(id);
    if (problems !== null) return this.refuse(problems, reply);
    const products = distinctIds(body.products);
    this.accept({ kind: 'collection_products_remove', workspace: ws.name, at, data: { id, products } }, reply, SUCCESS_BODY);
  }
}
