//! A Durable Object's alarm as its class sees it: set by an absolute time of the one clock
//! ([`super::clock`]), never moved later than one already set. `Storage::set_alarm` takes an
//! `i64` as an *offset* from now: every alarm an earlier version set with the Unix time was
//! decades ahead, so the time goes as a `Date`.

use std::cell::Cell;

use worker::{js_sys, Result, ScheduledTime, Storage};

use super::clock;

pub struct Alarm {
    storage: Storage,
    /// When the alarm runs, once known (read from storage, or as this instance set it).
    at: Cell<Option<Option<i64>>>,
}

impl Alarm {
    pub fn new(storage: Storage) -> Self {
        Alarm { storage, at: Cell::new(None) }
    }

    /// The alarm is running: none is set now.
    pub fn ran(&self) {
        self.at.set(Some(None));
    }

    /// Whether an alarm is set, as this instance knows (`false` when it does not know).
    pub fn is_set(&self) -> bool {
        matches!(self.at.get(), Some(Some(_)))
    }

    /// Makes sure the alarm runs at `at` at the latest (an instance that does not know the
    /// alarm reads it first, so an earlier one is never moved later).
    pub async fn set_by(&self, at: i64) -> Result<()> {
        let current = match self.at.get() {
            Some(known) => known,
            None => {
                let stored = self.storage.get_alarm().await?.map(clock::clock_ms);
                self.at.set(Some(stored));
                stored
            }
        };
        if current.is_none_or(|current| current > at) {
            // The runtime runs alarms by the real time (the test kit's clock may be ahead of it).
            let real = js_sys::Date::new(&js_sys::Number::from(clock::real_ms(at) as f64));
            self.storage.set_alarm(ScheduledTime::new(real)).await?;
            self.at.set(Some(Some(at)));
        }
        Ok(())
    }
}
