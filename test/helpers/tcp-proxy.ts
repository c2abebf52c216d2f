// A TCP proxy that can be cut and restored on the same port: a node given the proxy's address for
// PostgreSQL loses every connection to it at once (as a network partition does) while the other
// nodes, which reach PostgreSQL directly, go on. Or frozen: every connection stays open and
// nothing goes through (a backend that hangs, a network that drops packets), until thawed.
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** Stops listening and destroys every connection through it. */
  cut(): Promise<void>;
  /** Listens again on the same port. */
  restore(): Promise<void>;
  /** Stops passing bytes either way, connections kept open (new ones too): queries hang. */
  freeze(): void;
  /** Passes bytes again, those held meanwhile first. */
  thaw(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  /** Every connection through the proxy: the client's socket and its upstream one. */
  const pairs = new Set<[Socket, Socket]>();
  let frozen = false;
  const flow = ([client, upstream]: [Socket, Socket]): void => {
    client.pipe(upstream);
    upstream.pipe(client);
  };
  let server: Server | null = null;
  let port = 0;
  const listen = async (): Promise<void> => {
    const s = createServer((client) => {
      const upstream = connect(targetPort, targetHost);
      const pair: [Socket, Socket] = [client, upstream];
      pairs.add(pair);
      for (const socket of pair) {
        socket.on('error', () => undefined);
        socket.on('close', () => {
          pairs.delete(pair);
          client.destroy();
          upstream.destroy();
        });
      }
      if (!frozen) flow(pair);
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve());
    });
    port = (s.address() as AddressInfo).port;
    // Not holding the event loop: a test that fails before close() must still let its file end.
    s.unref();
    server = s;
  };
  const cut = async (): Promise<void> => {
    const s = server;
    server = null;
    for (const pair of pairs) for (const socket of pair) socket.destroy();
    if (s !== null) await new Promise<void>((resolve) => s.close(() => resolve()));
  };
  await listen();
  return {
    get port() {
      return port;
    },
    urlFor(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    cut,
    restore: listen,
    close: cut,
    freeze() {
      frozen = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    thaw() {
      frozen = false;
      for (const pair of pairs) flow(pair);
    },
  };
}
