// Live writes, routed to their actors: device writes to device actors (each runs to the end at
// once) and catalog writes through their workspace catalog actor's mailbox. Accepted writes are
// applied and journaled, and answered once durable (acceptor.ts).
import type { KeyTable } from '../idempotency/key-table.ts';
import type { Journal } from '../journal/journal.ts';
import { Acceptor, type RetryCounts } from './acceptor.ts';
import { CatalogWrites } from './catalog-writes.ts';
import { DeviceWrites } from './device-writes.ts';
import { ProfileInterner } from './interner.ts';
import type { Workspaces } from './workspace.ts';

export { SUCCESS_BODY, type Reply } from './acceptor.ts';

export class Intake {
  readonly workspaces: Workspaces;
  readonly interner = new ProfileInterner();
  readonly devices: DeviceWrites;
  readonly catalog: CatalogWrites;
  readonly retries: RetryCounts;

  constructor(workspaces: Workspaces, journal: Journal, keys: KeyTable) {
    this.workspaces = workspaces;
    const acceptor = new Acceptor(workspaces, this.interner, journal, keys);
    this.retries = acceptor.retries;
    this.devices = new DeviceWrites(acceptor);
    this.catalog = new CatalogWrites(acceptor);
  }
}
