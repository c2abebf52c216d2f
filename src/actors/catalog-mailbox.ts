// The catalog actor's mailbox: its messages run strictly in arrival order, one at a time. Most
// run at once (nothing ahead of them). A big mapping request reserves its place when its body
// has arrived and fills it when its worker is done; later catalog writes wait behind it. A
// message may also be asynchronous (a mapping applied in slices): the next one waits until it
// has finished, so no catalog write ever sees another half done.

export type CatalogJob = () => void | Promise<void>;
type OnError = (error: unknown) => void;

interface Slot {
  job: CatalogJob | null;
  onError: OnError;
}

/** Entries already run are dropped from the front of the queue once there are this many. */
const COMPACT_AFTER = 1024;

export class CatalogMailbox {
  private queue: Array<Slot | null> = [];
  private head = 0;
  private busy = false;

  /** Nothing queued and nothing running: a message would run at once. */
  get idle(): boolean {
    return !this.busy && this.head === this.queue.length;
  }

  /** Runs `job` after everything that arrived before it (at once when nothing did). */
  submit(job: CatalogJob, onError: OnError): void {
    this.queue.push({ job, onError });
    this.drain();
  }

  /** Takes the next place in line now; `fill` gives it its job later. */
  reserve(onError: OnError): (job: CatalogJob) => void {
    const slot: Slot = { job: null, onError };
    this.queue.push(slot);
    return (job) => {
      slot.job = job;
      this.drain();
    };
  }

  private drain(): void {
    while (!this.busy && this.head < this.queue.length) {
      const slot = this.queue[this.head]!;
      if (slot.job === null) return; // waiting for its worker
      this.queue[this.head++] = null;
      let result: void | Promise<void>;
      try {
        result = slot.job();
      } catch (error) {
        slot.onError(error);
        continue;
      }
      if (result instanceof Promise) {
        this.busy = true;
        result.then(
          () => this.resume(),
          (error: unknown) => {
            slot.onError(error);
            this.resume();
          },
        );
        return;
      }
    }
    if (this.head >= COMPACT_AFTER) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }

  private resume(): void {
    this.busy = false;
    this.drain();
  }
}
