// A customer of one workspace: identified devices link to it; identify merges its attributes.
import { mergeAttributes, type AttributeBag, type AttributeEntryInput } from './attributes.ts';
import type { ChangeTracker } from './change-tracker.ts';

export class Customer {
  readonly id: string;
  readonly attributes: AttributeBag = new Map();
  /** Snapshot epoch: see change-tracker.ts. */
  snapEpoch: number;

  constructor(id: string, epoch: number) {
    this.id = id;
    this.snapEpoch = epoch;
  }

  applyMerge(tracker: ChangeTracker, info: readonly AttributeEntryInput[]): void {
    tracker.beforeChange(this);
    mergeAttributes(this.attributes, info);
  }
}
