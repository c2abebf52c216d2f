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
import { jetstream, jetstreamManager, JetStreamApiError, type JetStreamClient, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { UndeliverableRecordError, SinkMismatchError, sinkId, type OutgoingRecord, type Sink, type SinkConfig, type SinkHead } from './sink.ts';

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
  private nc: NatsConnection | null = null;
  private js: JetStreamClient | null = null;
  /** The stream's last sequence: the expected last sequence of the next message. */
  private streamLastSeq = 0;
  private maxPayloadBytes = 0;
  /** After a failure, the first batch is one record with its own ack: its error is the real one. */
  private probe = true;

  constructor(config: Extract<SinkConfig, { kind: 'nats' }>) {
    this.url = config.url;
    this.stream = config.stream;
    this.prefix = config.subjectPrefix;
    this.subjects = `${config.subjectPrefix}.>`;
    this.id = sinkId(config);
  }

  async open(): Promise<SinkHead | null> {
    // No reconnects inside the client: a broken connection fails the batch, and the delivery
    // loop reconnects with its own backoff, then reads the stream before publishing again.
    const nc = await connect({ servers: this.url, reconnect: false, timeout: CONNECT_TIMEOUT_MS, name: 'intake-delivery' });
    this.nc = nc;
    this.probe = true;
    const jsm = await jetstreamManager(nc, { timeout: API_TIMEOUT_MS });
    const info = await this.streamInfo(jsm);
    this.streamLastSeq = info.state.last_seq;
    this.maxPayloadBytes = nc.info?.max_payload ?? 1024 * 1024;
    this.js = jetstream(nc, { timeout: ACK_TIMEOUT_MS });
    if (info.state.messages === 0) return null;
    // The newest message on intake's subjects (the stream's very last one unless someone deleted
    // it), stepping back over messages someone else published there (no numeric Nats-Msg-Id).
    let message = await jsm.streams.getMessage(this.stream, { last_by_subj: this.subjects });
    if (message === null) return null;
    let seq = message.seq;
    for (let scanned = 0; scanned < FOREIGN_SCAN_MESSAGES; scanned++) {
      const id = message?.header?.get('Nats-Msg-Id') ?? '';
      if (message !== null && message.subject.startsWith(`${this.prefix}.`) && /^[1-9][0-9]{0,15}$/.test(id)) {
        const body = message.string();
        return { seq: Number(id), matches: (record) => record.line === body };
      }
      if (seq <= info.state.first_seq) return null; // none of ours in the stream
      seq -= 1;
      message = await jsm.streams.getMessage(this.stream, { seq }); // null: deleted
    }
    throw new SinkMismatchError(`stream ${this.stream} holds no message published by intake among its last ${FOREIGN_SCAN_MESSAGES}`);
  }

  private async streamInfo(jsm: JetStreamManager): Promise<StreamInfo> {
    try {
      return await jsm.streams.info(this.stream);
    } catch (error) {
      if (!(error instanceof JetStreamApiError) || error.code !== STREAM_NOT_FOUND) throw error;
    }
    return jsm.streams.add({ name: this.stream, subjects: [this.subjects] });
  }

  async deliver(batch: readonly OutgoingRecord[]): Promise<number> {
    const nc = this.nc;
    const js = this.js;
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
          throw new UndeliverableRecordError(`record ${record.seq} is ${payload.length} bytes; the NATS server's max_payload is ${this.maxPayloadBytes} (raise max_payload in its configuration)`);
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
    if (ack.duplicate || ack.seq !== expected + 1) {
      // Stored before (a duplicate) or somewhere else than the chain says: let open() look.
      throw new Error(`JetStream stored record ${last.seq} at stream seq ${ack.seq}${ack.duplicate ? ' (duplicate)' : ''}, expected ${expected + 1}`);
    }
    this.streamLastSeq = ack.seq;
    this.probe = false;
    return payloads.length;
  }

  async close(): Promise<void> {
    const nc = this.nc;
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
