// The one place where a journal record changes state. Live writes call it right after their
// reference checks pass; recovery calls it for every stored record, in order. Keeping both on
// this path is what makes a restart rebuild exactly the state the acknowledged writes produced.
import type { JournalRecord } from '../journal/records.ts';
import type { AttributeEntryInput } from './attributes.ts';
import { DeviceActor } from './device-actor.ts';
import type { ProfileInterner } from './interner.ts';
import type { Workspaces } from './workspace.ts';

export function applyRecord(workspaces: Workspaces, interner: ProfileInterner, record: JournalRecord): void {
  const ws = workspaces.get(record.workspace);
  switch (record.kind) {
    case 'app_launch': {
      const profile = interner.intern(record.data.info);
      const device = ws.devices.get(record.did);
      if (device === undefined) ws.devices.set(record.did, new DeviceActor(record.did, record.sid, profile, ws.tracker.epoch));
      else device.applyLaunch(ws.tracker, record.sid, profile);
      return;
    }
    case 'event':
      // Events change no device state; the record itself is the data.
      return;
    case 'identify': {
      const { clientCustomerId, info } = record.data;
      const device = ws.devices.get(record.did);
      if (device === undefined) return;
      const customer = clientCustomerId === undefined ? null : ws.customer(clientCustomerId);
      device.applyIdentify(ws.tracker, customer, info as AttributeEntryInput[] | undefined);
      return;
    }
    case 'push_token':
      ws.devices.get(record.did)?.applyPushToken(ws.tracker, record.data.type, record.data.token);
      return;
    case 'logout':
      ws.devices.get(record.did)?.applyLogout(ws.tracker);
      return;
    case 'product_upsert':
      ws.catalog.applyProductUpsert(record.data);
      return;
    case 'product_delete':
      ws.catalog.applyProductDelete(record.data.id);
      return;
    case 'collection_upsert':
      ws.catalog.applyCollectionUpsert(record.data);
      return;
    case 'collection_delete':
      ws.catalog.applyCollectionDelete(record.data.id);
      return;
    case 'collection_products_add':
      ws.catalog.applyMappingAdd(record.data.id, record.data.products);
      return;
    case 'collection_products_remove':
      ws.catalog.applyMappingRemove(record.data.id, record.data.products);
      return;
  }
}
