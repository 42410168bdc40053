//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::cell::OnceCell;

use worker::{console_error, event, Context, Date, Env, Request, Response, Result};

use crate::adapters::{d1::D1Directory, guard::GuardClient};
use crate::app::{self, Gateway};
use crate::config::{Config, ConfigError};
use crate::core::error::ApiError;
use crate::guard::protocol;
use crate::http;

thread_local! {
    /// Vars and secrets are fixed for the life of an isolate: parse them once.
    static CONFIG: OnceCell<std::result::Result<&'static Config, ConfigError>> = const { OnceCell::new() };
}

fn config(env: &Env) -> std::result::Result<&'static Config, ConfigError> {
    CONFIG.with(|cell| {
        cell.get_or_init(|| {
            let lookup = |name: &str| {
                env.var(name)
                    .map(|v| v.to_string())
                    .or_else(|_| env.secret(name).map(|s| s.to_string()))
                    .ok()
            };
            Config::from_lookup(lookup).map(|c| &*Box::leak(Box::new(c)))
        })
        .clone()
    })
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let now_ms = Date::now().as_millis() as i64;
    let api = match config(&env) {
        Ok(config) => {
            let gateway = Gateway {
                config,
                guard: GuardClient::new(env.durable_object(protocol::BINDING)?),
                directory: D1Directory::new(env.d1("DB")?),
            };
            gateway.handle(http::api_request(req, now_ms)?).await
        }
        Err(e) => app::failure(ApiError::internal(e.to_string())),
    };
    if let Some(cause) = &api.internal_error {
        console_error!("request {} failed: {cause}", api.request_id);
    }
    http::response(api)
}
