// The module wrangler loads (wrangler.toml `main`): the worker that worker-build makes of the Rust
// crate (build/index.js), with its Durable Object classes deriving from `DurableObject`, which the
// runtime requires of a class before it serves RPC calls on it. The worker asks its KeyGuard over
// RPC (`ask`, src/objects/key_guard/mod.rs): one string each way instead of a Request and a Response.
import { DurableObject } from 'cloudflare:workers';
import { KeyGuardObject } from '../../../build/index.js';

Object.setPrototypeOf(KeyGuardObject.prototype, DurableObject.prototype);
Object.setPrototypeOf(KeyGuardObject, DurableObject);

export * from '../../../build/index.js';
export { default } from '../../../build/index.js';
