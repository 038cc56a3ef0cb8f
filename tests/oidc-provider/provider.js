// A real OpenID provider (the certified `oidc-provider` package) for the single sign-on tests
// (tests/it/oidc.rs): client-credentials grant, JWT access tokens through resource indicators.
//
// Two issuers on two loopback ports share one key set: `main`, the one the service trusts, and
// `other`, whose tokens are signed by the same keys but carry another `iss`. Clients `alice` and
// `bob` (secret `secret`) get tokens whose `sub` is their client id. A token request's body may carry
// `dirichlet_role`, `dirichlet_datasets` (comma-separated) and `dirichlet_other` (any claim
// name=value), copied into the token as claims; `exp_offset` / `nbf_offset` (seconds from now)
// set `exp` / `nbf`, so that expired and not-yet-valid tokens come from the provider itself.
//
// Standard input takes commands, one per line, each answered by one line on standard output:
//   rotate  -> a new signing key (the old one is dropped from the key set): `rotated <kid>`
//   stop    -> both issuers stop answering (connections refused): `stopped`
// The first line printed is `ready {"main": URL, "other": URL, "kid": KID}`.
import * as crypto from 'node:crypto';
import * as http from 'node:http';
import * as readline from 'node:readline';

import Provider from 'oidc-provider';

function newKey() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' });
  return { ...jwk, kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };
}

let keys = [newKey()];

function configuration() {
  return {
    clients: ['alice', 'bob'].map((id) => ({
      client_id: id,
      client_secret: 'secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
    })),
    jwks: { keys },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => 'https://dirichlet.test',
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'api',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    extraTokenClaims: (ctx) => {
      const params = ctx.oidc.body ?? {};
      const claims = {};
      if (params.dirichlet_role) claims.dirichlet_role = params.dirichlet_role;
      if (params.dirichlet_datasets !== undefined) {
        claims.dirichlet_datasets = params.dirichlet_datasets.split(',').filter((d) => d);
      }
      if (params.dirichlet_other) {
        const [name, value] = params.dirichlet_other.split('=');
        claims[name] = value;
      }
      return claims;
    },
    formats: {
      customizers: {
        jwt: (ctx, _token, jwt) => {
          const params = ctx?.oidc?.body ?? {};
          const now = Math.floor(Date.now() / 1000);
          if (params.exp_offset) jwt.payload.exp = now + Number(params.exp_offset);
          if (params.nbf_offset) jwt.payload.nbf = now + Number(params.nbf_offset);
        },
      },
    },
  };
}

// Each issuer's server is bound first (port 0), so that its URL is known before its provider is
// made; a rotation swaps the provider behind the same port.
async function issuer() {
  const state = { handler: null };
  const server = http.createServer((req, res) => state.handler(req, res));
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  const url = `http://127.0.0.1:${server.address().port}`;
  state.rebuild = () => {
    const provider = new Provider(url, configuration());
    provider.on('server_error', (_ctx, error) => console.error('provider error', error));
    state.handler = provider.callback();
  };
  state.rebuild();
  state.server = server;
  state.url = url;
  return state;
}

const main = await issuer();
const other = await issuer();
console.log(`ready ${JSON.stringify({ main: main.url, other: other.url, kid: keys[0].kid })}`);

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const command = line.trim();
  if (command === 'rotate') {
    keys = [newKey()];
    main.rebuild();
    other.rebuild();
    console.log(`rotated ${keys[0].kid}`);
  } else if (command === 'stop') {
    for (const { server } of [main, other]) {
      server.close();
      server.closeAllConnections();
    }
    console.log('stopped');
  }
}).on('close', () => process.exit(0));
