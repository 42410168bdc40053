//! Reading the typed [`Config`] from `Env`, once per isolate (vars and secrets cannot change
//! while an isolate lives).

use std::cell::OnceCell;

use worker::Env;

use gatehouse_core::config::{Config, ConfigError};

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
                .and_then(|c| c.check_services(|binding| env.service(binding).is_ok()).map(|()| c))
                .map(|c| &*Box::leak(Box::new(c)))
        })
        .clone()
    })
}
