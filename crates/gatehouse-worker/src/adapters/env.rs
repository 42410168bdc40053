//! Reading the typed [`Config`] from `Env`, once per isolate (vars and secrets cannot change
//! while an isolate lives).

use std::cell::OnceCell;

use worker::Env;

use gatehouse_core::config::{Config, ConfigError};
use gatehouse_core::upstream::OriginTarget;

thread_local! {
    static CONFIG: OnceCell<Result<&'static Config, ConfigError>> = const { OnceCell::new() };
}

pub fn config(env: &Env) -> Result<&'static Config, ConfigError> {
    CONFIG.with(|cell| {
        cell.get_or_init(|| {
            let lookup = |name: &str| {
                env.var(name).map(|v| v.to_string()).or_else(|_| env.secret(name).map(|s| s.to_string())).ok()
            };
            // Leaked once per isolate, so handlers can borrow it for 'static.
            Config::from_lookup(lookup)
                .and_then(|c| bound_services(env, &c).map(|()| c))
                .map(|c| &*Box::leak(Box::new(c)))
        })
        .clone()
    })
}

/// Every `service:BINDING` origin of `UPSTREAMS` names a binding this worker has (SPEC §15: a
/// bad route is a configuration error, not a 502 on each request).
fn bound_services(env: &Env, config: &Config) -> Result<(), ConfigError> {
    for upstream in &config.upstreams {
        if let OriginTarget::Service(binding) = &upstream.origin {
            if env.service(binding).is_err() {
                return Err(ConfigError(format!(
                    "UPSTREAMS: the origin of {} is service:{binding}, but no service binding {binding} is configured",
                    upstream.prefix
                )));
            }
        }
    }
    Ok(())
}
