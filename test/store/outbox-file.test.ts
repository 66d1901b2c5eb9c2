// Where the outbox keeps its files (SPEC §21): the OS state dir unless store.outboxDir says otherwise,
// one directory per store, so records of one store are never written to another.
import { join } from 'node:path';
import t from 'tap';
import type { GatewayConfig } from '../../src/config/schema.js';
import { defaultOutboxDir, outboxDirFor } from '../../src/store/outbox-file.js';

t.test('the default is the OS state dir: $XDG_STATE_HOME, else ~/.local/state; %LOCALAPPDATA% on Windows', async (t) => {
  t.equal(defaultOutboxDir({ XDG_STATE_HOME: '/var/state' }, 'linux', '/home/op'), join('/var/state', 'tollbooth', 'outbox'));
  t.equal(defaultOutboxDir({}, 'linux', '/home/op'), join('/home/op', '.local', 'state', 'tollbooth', 'outbox'));
  t.equal(defaultOutboxDir({ XDG_STATE_HOME: '' }, 'darwin', '/Users/op'), join('/Users/op', '.local', 'state', 'tollbooth', 'outbox'));
  t.equal(defaultOutboxDir({ LOCALAPPDATA: 'C:\\Users\\op\\AppData\\Local' }, 'win32', 'C:\\Users\\op'), join('C:\\Users\\op\\AppData\\Local', 'tollbooth', 'outbox'));
});

t.test('store.outboxDir is honoured, with one directory per store (address and key prefix)', async (t) => {
  const store = (redis: { url: string; keyPrefix?: string }, outboxDir?: string): GatewayConfig['store'] => ({ type: 'redis', redis: { keyPrefix: 'tollbooth:', ...redis }, ...(outboxDir === undefined ? {} : { outboxDir }) });
  const a = outboxDirFor(store({ url: 'redis://a:6379' }, '/srv/outbox'));
  t.match(a, /^\/srv\/outbox\/[0-9a-f]{16}$/);
  t.equal(outboxDirFor(store({ url: 'redis://a:6379' }, '/srv/outbox')), a, 'stable for one store');
  t.not(outboxDirFor(store({ url: 'redis://a:6379', keyPrefix: 'other:' }, '/srv/outbox')), a, 'another key prefix is another store');
  t.not(outboxDirFor(store({ url: 'redis://b:6379' }, '/srv/outbox')), a, 'another server is another store');
  t.match(outboxDirFor(store({ url: 'redis://a:6379' }), { XDG_STATE_HOME: '/var/state' }), /^\/var\/state\/tollbooth\/outbox\/[0-9a-f]{16}$/, 'absent: the default');
});
