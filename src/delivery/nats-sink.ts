// The NATS JetStream sink. Each record is one message on `intake.<workspace>.<kind>`, its body
// the exported JSON line, header `Nats-Msg-Id` its seq. (`intake` is SINK_NATS_SUBJECT_PREFIX:
// two streams of one NATS account cannot share subjects, so two intakes need two prefixes.)
//
// Exactly once, in order, without trusting a time window: every message also says which message
// must be the stream's last when it arrives: `Nats-Expected-Last-Sequence` (the stream sequence
// its predecessor got) and `Nats-Expected-Last-Msg-Id` (its predecessor's seq). The stream stores
// a message only right after intake's record seq - 1, so whatever happens to a batch (a publish
// lost in a server restart, a timeout, a leader change, someone else's message in between), the
// stream holds an unbroken prefix of the journal: no record is stored after one with a higher
// seq, none twice. A batch is sent as plain publishes (no reply each) and only its last message
// is published with an ack: that ack proves the whole chain before it. If it does not come, or
// says anything else, the connection is dropped (with whatever it still buffered) and open()
// reads the stream's last message on `intake.>`: its `Nats-Msg-Id` is where the journal resumes.
// The first message after open() expects the last sequence only (its predecessor may be someone
// else's message, and a server may not remember the last msg id across a restart). The stream's
// duplicate window on `Nats-Msg-Id` stays as a second guard only.
//
// The stream should hold intake's messages alone: another publisher's message breaks the chain
// (intake's next batch is refused, read again, and sent again after it).
//
// Where delivery resumes (open). The stream is the authority, with a marker the loop keeps for
// it: the stream's `created` time and the stream sequence of the last record it confirmed.
// - No stream: it is created, and gets every retained record.
// - The stream holds a message of ours: delivery goes on after it. When the slots after it up to
//   the stream's last sequence are all deleted and the stream is the one of the marker (same
//   `created`), they were ours (the chain: after one of ours only our next record can be
//   stored, until someone else's message breaks it, and that one would still be there) and were
//   removed (a WorkQueue or max_age stream, an operator): they count as delivered.
// - The stream holds nothing of ours: when it is the marker's stream and its last sequence has
//   not gone back, every sequence after the marker's was one of our records, in order, removed
//   since: delivery goes on after the last of them. Otherwise (another stream of that name, or
//   one that lost data) it gets every retained record.
// So a stream that removes what it was given is never handed it again, and a new one gets
// everything. Not supported: someone else's messages in a stream that also removes messages
// (a removed foreign message after ours would be counted as one of ours).
import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { UndeliverableRecordError, SinkMismatchError, sinkId, type Confirmed, type Delivered, type OutgoingRecord, type Sink, type SinkConfig, type SinkMarker, type SinkOpened } from './sink.ts';

const STREAM_NOT_FOUND = 10059;
/** A server that does not answer within this is treated as down (then retried with backoff). */
const CONNECT_TIMEOUT_MS = 3_000;
const API_TIMEOUT_MS = 5_000;
/** Wait for the ack of a batch's last message; a batch is at most a few MB. */
const ACK_TIMEOUT_MS = 10_000;
/** How far back open() looks past messages someone else published on our subjects. */
const FOREIGN_SCAN_MESSAGES = 1_000;
/** Room for the headers inside the server's max_payload (subject, two headers, protocol). */
const HEADER_ALLOWANCE_BYTES = 512;

const encoder = new TextEncoder();

/** Subject tokens: no empty token, no wildcard, no whitespace (a workspace may hold dots). */
const SUBJECT = /^[^.*>\s]+(\.[^.*>\s]+)*$/;

/** The NATS sink's marker: which stream (its creation time) and where in it. */
type NatsMarker = {
  created: string;
  /** The stream sequence of the last record confirmed (or, with none yet, the stream's last sequence then). */
  streamSeq: number;
};

function natsMarker(marker: SinkMarker | null): NatsMarker | null {
  if (marker === null || typeof marker.created !== 'string' || typeof marker.streamSeq !== 'number') return null;
  return { created: marker.created, streamSeq: marker.streamSeq };
}

/** `<prefix>.<workspace>.<kind>` */
export function natsSubject(prefix: string, record: OutgoingRecord['record']): string {
  return `${prefix}.${record.workspace}.${record.kind}`;
}

export class NatsSink implements Sink {
  readonly kind = 'nats';
  readonly id: string;
  private readonly url: string;
  private readonly stream: string;
  private readonly prefix: string;
  /** `<prefix>.>`: the stream's subjects when intake creates it. */
  private readonly subjects: string;
  readonly keepsPosition = false;
  private nc: NatsConnection | null = null;
  private js: JetStreamClient | null = null;
  /** The stream's last sequence: the expected last sequence of the next message. */
  private streamLastSeq = 0;
  /** The stream's creation time (its identity) and the stream sequence of the last confirmed record. */
  private created = '';
  private confirmedStreamSeq = 0;
  /** The largest message (payload and headers) this stream takes: see open(). */
  private maxPayloadBytes = 0;
  private serverMaxPayloadBytes = 0;
  private streamMaxMsgBytes: number | null = null;
  /** After a failure, the first batch is one record with its own ack: its error is the real one. */
  private probe = true;
  /**
   * Bumped by close(): a call that was given up on (the loop's stall deadline) and finishes
   * later sees it changed and leaves this object's state alone (it belongs to the next connection).
   */
  private epoch = 0;

  constructor(config: Extract<SinkConfig, { kind: 'nats' }>) {
    this.url = config.url;
    this.stream = config.stream;
    this.prefix = config.subjectPrefix;
    this.subjects = `${config.subjectPrefix}.>`;
    this.id = sinkId(config);
  }

  async open(confirmed: Confirmed | null): Promise<SinkOpened> {
    const epoch = this.epoch;
    // No reconnects inside the client: a broken connection fails the batch, and the delivery
    // loop reconnects with its own backoff, then reads the stream before publishing again.
    const nc = await connect({ servers: this.url, reconnect: false, timeout: CONNECT_TIMEOUT_MS, name: 'intake-delivery' });
    if (epoch !== this.epoch) {
      // Given up on while connecting: this connection is nobody's.
      void nc.close().catch(() => undefined);
      throw new Error('closed while connecting');
    }
    this.nc = nc;
    this.probe = true;
    const jsm = await jetstreamManager(nc, { timeout: API_TIMEOUT_MS });
    const info = await this.streamInfo(jsm);
    const found = await this.find(jsm, info, natsMarker(confirmed?.marker ?? null), confirmed);
    if (epoch !== this.epoch) throw new Error('closed while opening');
    this.streamLastSeq = info.state.last_seq;
    this.created = info.created;
    this.confirmedStreamSeq = found.streamSeq;
    // The smaller of the server's max_payload and the stream's own max_msg_size (-1: none): a
    // record over the stream's limit went out in a batch, JetStream refused it, the rest of the
    // batch failed its chain check, and delivery waited at it for good with only "wrong last
    // sequence" in the log (found by a review).
    this.serverMaxPayloadBytes = nc.info?.max_payload ?? 1024 * 1024;
    this.streamMaxMsgBytes = info.config.max_msg_size !== undefined && info.config.max_msg_size > 0 ? info.config.max_msg_size : null;
    this.maxPayloadBytes = Math.min(this.serverMaxPayloadBytes, this.streamMaxMsgBytes ?? Infinity);
    this.js = jetstream(nc, { timeout: ACK_TIMEOUT_MS });
    return { seq: found.seq, how: found.how, matches: found.matches, marker: { created: info.created, streamSeq: found.streamSeq } };
  }

  /** Where the journal stands in this stream (see the top of this file). */
  private async find(
    jsm: JetStreamManager,
    info: StreamInfo,
    marker: NatsMarker | null,
    confirmed: Confirmed | null,
  ): Promise<{ seq: number; how: SinkOpened['how']; matches: SinkOpened['matches']; streamSeq: number }> {
    const { last_seq: lastSeq } = info.state;
    const same = marker !== null && marker.created === info.created && lastSeq >= marker.streamSeq;
    const ours = await this.lastOfOurs(jsm, info);
    if (ours !== null) {
      let { seq, streamSeq } = ours;
      if (same && streamSeq < lastSeq && (await this.allDeletedAfter(jsm, streamSeq))) {
        // Ours, and removed since (see the top of this file).
        seq += lastSeq - streamSeq;
        streamSeq = lastSeq;
      }
      return { seq, how: 'holds', matches: ours.matches, streamSeq };
    }
    if (same) return { seq: confirmed!.seq + (lastSeq - marker.streamSeq), how: 'consumed', matches: null, streamSeq: lastSeq };
    if (marker === null && confirmed !== null && confirmed.seq > 0) {
      // Saved by an intake before markers: it resumed at the saved seq, and so does this one.
      return { seq: confirmed.seq, how: 'consumed', matches: null, streamSeq: lastSeq };
    }
    return { seq: 0, how: 'new', matches: null, streamSeq: lastSeq };
  }

  /**
   * The newest message of ours (the stream's very last one unless someone deleted it), stepping
   * back over messages someone else published on our subjects (no numeric Nats-Msg-Id); null
   * when the stream holds none.
   */
  private async lastOfOurs(jsm: JetStreamManager, info: StreamInfo): Promise<{ seq: number; streamSeq: number; matches: (record: OutgoingRecord) => boolean } | null> {
    if (info.state.messages === 0) return null;
    let message = await jsm.streams.getMessage(this.stream, { last_by_subj: this.subjects });
    if (message === null) return null;
    let seq = message.seq;
    for (let scanned = 0; scanned < FOREIGN_SCAN_MESSAGES; scanned++) {
      const id = message?.header?.get('Nats-Msg-Id') ?? '';
      if (message !== null && message.subject.startsWith(`${this.prefix}.`) && /^[1-9][0-9]{0,15}$/.test(id)) {
        const body = message.string();
        return { seq: Number(id), streamSeq: seq, matches: (record) => record.line === body };
      }
      if (seq <= info.state.first_seq) return null; // none of ours in the stream
      seq -= 1;
      message = await jsm.streams.getMessage(this.stream, { seq }); // null: deleted
    }
    throw new SinkMismatchError(`stream ${this.stream} holds no message published by intake among its last ${FOREIGN_SCAN_MESSAGES} messages`);
  }

  /** True when the stream holds no message (on any subject) after stream sequence `streamSeq`. */
  private async allDeletedAfter(jsm: JetStreamManager, streamSeq: number): Promise<boolean> {
    // The first message at or after streamSeq + 1 on any subject (server 2.9+).
    const next = await jsm.streams.getMessage(this.stream, { seq: streamSeq + 1, next_by_subj: '>' } as unknown as { seq: number });
    return next === null;
  }

  private async streamInfo(jsm: JetStreamManager): Promise<StreamInfo> {
    try {
      return await jsm.streams.info(this.stream);
    } catch (error) {
      if (!(error instanceof JetStreamApiError) || error.code !== STREAM_NOT_FOUND) throw error;
    }
    return jsm.streams.add({ name: this.stream, subjects: [this.subjects] });
  }

  async deliver(batch: readonly OutgoingRecord[]): Promise<Delivered> {
    const nc = this.nc;
    const js = this.js;
    const epoch = this.epoch;
    if (nc === null || js === null || nc.isClosed()) throw new Error('not connected to NATS');
    const count = this.probe ? 1 : batch.length;
    const payloads: Uint8Array[] = [];
    for (let i = 0; i < count; i++) {
      const record = batch[i]!;
      if (!SUBJECT.test(record.record.workspace)) {
        // Names allowed before dots were checked (key-store.ts) can make no subject.
        throw new UndeliverableRecordError(`record ${record.seq}: workspace "${record.record.workspace}" makes no valid NATS subject; rename it`);
      }
      const payload = encoder.encode(record.line);
      if (payload.length + HEADER_ALLOWANCE_BYTES > this.maxPayloadBytes) {
        if (i === 0) {
          throw new UndeliverableRecordError(
            this.streamMaxMsgBytes !== null && this.streamMaxMsgBytes < this.serverMaxPayloadBytes
              ? `record ${record.seq} is ${payload.length} bytes; stream ${this.stream} takes messages up to ${this.streamMaxMsgBytes} bytes (max_msg_size, headers included: raise it, or remove it)`
              : `record ${record.seq} is ${payload.length} bytes; the NATS server's max_payload is ${this.maxPayloadBytes} (raise max_payload in its configuration)`,
          );
        }
        break; // delivered up to here; the big one starts the next batch and fails there
      }
      payloads.push(payload);
    }
    let expected = this.streamLastSeq;
    const lastIndex = payloads.length - 1;
    for (let i = 0; i < lastIndex; i++) {
      const record = batch[i]!;
      const h = headers();
      h.set('Nats-Msg-Id', String(record.seq));
      h.set('Nats-Expected-Last-Sequence', String(expected));
      // The probe (i = 0 after open) is sent alone, with an ack: never here.
      h.set('Nats-Expected-Last-Msg-Id', String(record.seq - 1));
      nc.publish(natsSubject(this.prefix, record.record), payloads[i]!, { headers: h });
      expected++;
    }
    const last = batch[lastIndex]!;
    const ack = await js.publish(natsSubject(this.prefix, last.record), payloads[lastIndex]!, {
      msgID: String(last.seq),
      expect: this.probe ? { lastSequence: expected } : { lastSequence: expected, lastMsgID: String(last.seq - 1) },
    });
    if (epoch !== this.epoch) throw new Error('connection closed');
    if (ack.duplicate && this.probe) {
      // The first record after open() was stored already (the server knows its Nats-Msg-Id):
      // a publish of a batch given up on that landed after open() read the stream. It is
      // stored, where the chain put it: count it, and probe on with the next one.
      this.confirmedStreamSeq = ack.seq;
      this.streamLastSeq = Math.max(this.streamLastSeq, ack.seq);
      return { records: 1, marker: this.marker() };
    }
    if (ack.duplicate || ack.seq !== expected + 1) {
      // Stored before (a duplicate) or somewhere else than the chain says: let open() look.
      throw new Error(`JetStream stored record ${last.seq} at stream seq ${ack.seq}${ack.duplicate ? ' (duplicate)' : ''}, expected ${expected + 1}`);
    }
    this.streamLastSeq = ack.seq;
    this.confirmedStreamSeq = ack.seq;
    this.probe = false;
    return { records: payloads.length, marker: this.marker() };
  }

  private marker(): NatsMarker {
    return { created: this.created, streamSeq: this.confirmedStreamSeq };
  }

  connected(): boolean {
    return this.nc !== null && !this.nc.isClosed();
  }

  async close(): Promise<void> {
    const nc = this.nc;
    this.epoch++;
    this.nc = null;
    this.js = null;
    if (nc === null) return;
    try {
      // close() may still flush publishes of a failed batch. Harmless: each expects the stream
      // sequence of its own place in the chain, so it is stored exactly there or not at all.
      await nc.close();
    } catch {
      // already closed
    }
  }
}
