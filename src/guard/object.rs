//! The Durable Object class itself. It keeps the key's record in memory once loaded (one D1 query
//! per object start); an `Invalidate` drops it, and an epoch counter makes sure a load that raced
//! with an invalidation is not kept.

use std::cell::{Cell, RefCell};

use worker::{durable_object, wasm_bindgen, DurableObject, Env, Request, Response, Result, State};

use super::protocol::{GuardAnswer, GuardCommand};
use crate::adapters::d1::D1Directory;
use crate::core::api_key::KeyRecord;
use crate::ports::Directory;

#[durable_object]
pub struct KeyGuardObject {
    env: Env,
    key: RefCell<Option<KeyRecord>>,
    epoch: Cell<u64>,
}

impl DurableObject for KeyGuardObject {
    fn new(_state: State, env: Env) -> Self {
        Self {
            env,
            key: RefCell::new(None),
            epoch: Cell::new(0),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let command: GuardCommand = req.json().await?;
        let answer = match command {
            GuardCommand::Authorize { key_hash } => match self.record(&key_hash).await? {
                Some(key) if !key.is_revoked() => GuardAnswer::Granted { key },
                _ => GuardAnswer::Denied,
            },
            GuardCommand::Invalidate { .. } => {
                self.epoch.set(self.epoch.get() + 1);
                self.key.replace(None);
                GuardAnswer::Done
            }
        };
        Response::from_json(&answer)
    }
}

impl KeyGuardObject {
    /// The remembered record, loaded from D1 when the object has none. Unknown keys are not
    /// remembered: a key created later under this hash must be found.
    async fn record(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        if let Some(key) = self.key.borrow().as_ref() {
            return Ok(Some(key.clone()));
        }
        let epoch = self.epoch.get();
        let directory = D1Directory::new(self.env.d1("DB")?);
        let loaded = directory
            .key_by_hash(key_hash)
            .await
            .map_err(|e| worker::Error::RustError(e.0))?;
        if epoch == self.epoch.get() {
            self.key.replace(loaded.clone());
        }
        Ok(loaded)
    }
}
