//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::rc::Rc;

use worker::{console_error, console_log, event, Context, Date, Env, Request, Response, Result};

use crate::adapters::{d1::D1Directory, env::config, guard::GuardClient};
use crate::app::{self, Gateway};
use crate::core::error::ApiError;
use crate::guard::protocol;
use crate::http;
use crate::ports::Meter;

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let now_ms = Date::now().as_millis() as i64;
    let meter = Rc::new(Meter::default());
    let (method, path) = (req.inner().method(), req.path());
    let api = match config(&env) {
        Ok(config) => {
            let gateway = Gateway {
                config,
                guard: GuardClient::new(env.durable_object(protocol::BINDING)?, meter.clone()),
                directory: D1Directory::new(env.d1("DB")?, meter.clone()),
            };
            gateway.handle(http::api_request(req, now_ms)?).await
        }
        Err(e) => app::failure(ApiError::internal(e.to_string())),
    };
    if let Some(cause) = &api.internal_error {
        console_error!("request {} failed: {cause}", api.request_id);
    }
    // One line per request: what it cost in I/O before the response (SPEC §12 budget).
    console_log!(
        r#"{{"request_id":"{}","method":"{method}","path":{:?},"status":{},"ms":{},"durable_object_calls":{},"d1_queries":{},"kv_operations":{}}}"#,
        api.request_id,
        path,
        api.status,
        Date::now().as_millis() as i64 - now_ms,
        meter.durable_object_calls.get(),
        meter.d1_queries.get(),
        meter.kv_operations.get(),
    );
    http::response(api)
}
