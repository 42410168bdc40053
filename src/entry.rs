//! The worker's only entry points. Each builds the adapters from `Env` and delegates.

use std::rc::Rc;

use worker::{console_error, console_log, event, Context, Date, Env, Request, Response, Result};

use crate::adapters::{d1::D1Store, env::config, guard::GuardClient, kv};
use crate::app::{self, Gateway};
use crate::config::Config;
use crate::core::error::ApiError;
use crate::guard::protocol;
use crate::http;
use crate::ports::Meter;

type WorkerGateway = Gateway<'static, GuardClient, D1Store, kv::KvResponses>;

fn gateway(env: &Env, config: &'static Config, meter: &Rc<Meter>) -> Result<WorkerGateway> {
    Ok(Gateway {
        config,
        guard: GuardClient::new(env.durable_object(protocol::BINDING)?, meter.clone()),
        store: D1Store::new(env.d1("DB")?, meter.clone()),
        responses: kv::KvResponses::new(
            env.kv(kv::BINDING)?,
            config.idempotency_ttl_seconds,
            meter.clone(),
        ),
    })
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let now_ms = Date::now().as_millis() as i64;
    let meter = Rc::new(Meter::default());
    let (method, path) = (req.inner().method(), req.path());
    let mut api = match config(&env) {
        Ok(config) => {
            gateway(&env, config, &meter)?
                .handle(http::api_request(req, now_ms)?)
                .await
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
    if let (Some(settlement), Ok(config)) = (api.settlement.take(), config(&env)) {
        let request_id = api.request_id.clone();
        let after = gateway(&env, config, &Rc::new(Meter::default()))?;
        ctx.wait_until(async move {
            if let Err(e) = after.settle(settlement).await {
                console_error!("request {request_id}: settling its idempotency claim failed: {e}");
            }
        });
    }
    http::response(api)
}
