// Yardstick: a bare uWebSockets.js server that only reads the body, parses the JSON and answers.
// Whatever intake costs beyond this is our validation, actors, journal and bookkeeping.
import uWS from 'uWebSockets.js';
import { readBody } from './lib/uws-body.ts';

const port = Number(process.env.PORT ?? 0);
const SUCCESS = '{"success":true}';

uWS
  .App()
  .post('/*', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    readBody(res, (body) => {
      let ok = true;
      try {
        JSON.parse(body.toString('utf8'));
      } catch {
        ok = false;
      }
      if (aborted) return;
      res.cork(() => {
        res.writeStatus(ok ? '200 OK' : '400 Bad Request').writeHeader('content-type', 'application/json').end(SUCCESS);
      });
    });
  })
  .listen('127.0.0.1', port, (socket) => {
    if (socket === false) {
      process.stderr.write('bare-uws: cannot listen\n');
      process.exit(1);
    }
    process.stdout.write(`${JSON.stringify({ msg: 'listening', port: uWS.us_socket_local_port(socket) })}\n`);
  });
