//! The simulation's steps: what each event does to the isolates, the shards and the audit rows.

use super::*;

impl Sim<'_> {
    pub(super) fn on(&mut self, now_us: i64, event: Event) {
        match event {
            Event::Burst { isolate, size } => {
                for _ in 0..size {
                    self.track(isolate, now_us);
                }
                let p = self.p;
                let next = self.rng.burst(p.mean_burst);
                let gap =
                    self.rng.burst_gap_us(next, p.requests_per_second * p.ramp(now_us) / p.isolates as f64);
                if now_us + gap < p.duration_ms * 1000 {
                    self.events.push(now_us + gap.max(1), Event::Burst { isolate, size: next });
                }
            }
            Event::Arrive { object, call } => self.arrive(now_us, object, call),
            Event::Serve { object, call } => self.serve(now_us, object, call),
            Event::Checked { task, answer } => {
                let t = &self.tasks[&task];
                *t.link.answer.borrow_mut() = Some(answer);
                let cost = self.p.per_id_us * t.ids as i64;
                let done = self.objects[t.object].server.queue(now_us, cost);
                self.events.push(done, Event::Resume { task });
            }
            Event::Resume { task } => {
                let t = self.tasks.remove(&task).expect("a suspended task");
                self.step(now_us, task, t);
            }
            Event::Forwarded { forward, child, answer } => self.forwarded(now_us, forward, child, answer),
            Event::Reply { track, object, ids, answer } => self.reply(now_us, track, object, ids, answer),
        }
    }

    /// A new `/v1/track` request at an isolate: a batch of new ids and some retries.
    fn track(&mut self, isolate: usize, now_us: i64) {
        let p = self.p;
        let first_new = self.ids.made;
        let mut ids = Vec::with_capacity(p.batch);
        let mut numbers = HashSet::new();
        for _ in 0..p.batch {
            let retry = self.rng.unit() < p.retry_share;
            let ago_us = match self.rng.unit() < p.quick_retry_share {
                true => 0..200_000,
                false => 1_000_000..10_000_000,
            };
            let n = match retry.then(|| self.ids.sent_before(now_us, ago_us, &mut self.rng)).flatten() {
                Some(n) => n,
                None => self.ids.fresh(now_us),
            };
            // An id twice in one batch counts once (`accept_events`).
            if numbers.insert(n) {
                ids.push(Ids::name(n));
            }
        }
        let track = self.tracks.len();
        self.tracks.push(Track {
            isolate,
            owner: format!("req_{track}"),
            arrived_us: now_us,
            first_new,
            events: ids.len(),
            waiting: 0,
            rounds: 0,
            calls: 0,
            moved: Vec::new(),
            failed: false,
            attempted: Vec::new(),
            reserved: Vec::new(),
            decisions: Vec::new(),
        });
        if p.measured(now_us) {
            self.stats.requests += 1;
            self.stats.events_offered += ids.len() as u64;
        }
        self.send_round(now_us, track, ids);
    }

    /// One round of reserves: the ids by the shard the isolate knows for each, side by side.
    fn send_round(&mut self, now_us: i64, track: usize, ids: Vec<String>) {
        let t = &self.tracks[track];
        let iso = &self.isolates[t.isolate];
        let mut by_shard: BTreeMap<(u8, u64), Vec<String>> = BTreeMap::new();
        for id in ids {
            let shard = iso.layout.shard_for(&self.p.namespace, &id);
            by_shard.entry((shard.level, shard.index)).or_default().push(id);
        }
        let at = now_us + iso.round_trip_us / 2;
        self.tracks[track].waiting = by_shard.len();
        self.tracks[track].calls += by_shard.len();
        for ((level, index), ids) in by_shard {
            let object = self.object(Shard { level, index });
            self.events
                .push(at, Event::Arrive { object, call: Call::Reserve { to: ReplyTo::Isolate(track), ids } });
        }
    }

    /// A reserve's answer on its way back: to the isolate, or to the shard that forwarded it.
    fn answer_reserve(
        &mut self,
        now_us: i64,
        to: ReplyTo,
        object: usize,
        ids: Vec<String>,
        answer: Result<ShardAnswer, Overloaded>,
    ) {
        match to {
            ReplyTo::Isolate(track) => {
                let at = now_us + self.isolates[self.tracks[track].isolate].round_trip_us / 2;
                self.events.push(at, Event::Reply { track, object, ids, answer });
            }
            ReplyTo::Forward { forward, child } => {
                let at = now_us + (self.p.object_round_trip_ms * 500.0) as i64;
                self.events.push(at, Event::Forwarded { forward, child, answer });
            }
        }
    }

    /// A split shard forwards a reserve to its children (`core::ledger::forward`); `false` when it
    /// cannot (the deepest level, or forwarding switched off: it answers `moved`).
    fn forward(&mut self, now_us: i64, object: usize, to: ReplyTo, ids: &[String]) -> bool {
        let shard = self.objects[object].shard;
        let ancestors = shard.ancestors(&self.p.namespace);
        let Some(plan) =
            ForwardTo::plan(&self.p.namespace, shard.level, &ancestors, ids).filter(|_| self.p.forwarding)
        else {
            return false;
        };
        let forward = self.forwards.len();
        let at = now_us + (self.p.object_round_trip_ms * 500.0) as i64;
        for (child, c) in plan.children.iter().enumerate() {
            let target = self.object(shard.child(id_hash(&c.ids[0])).expect("not the deepest level"));
            let call = Call::Reserve { to: ReplyTo::Forward { forward, child }, ids: c.ids.clone() };
            self.events.push(at, Event::Arrive { object: target, call });
        }
        let answers = vec![None; plan.children.len()];
        self.forwards.push(Forwarding { object, plan, answers, failed: false, to, ids: ids.to_vec() });
        true
    }

    /// A child's answer to a forwarded reserve; with the last, the forwarding shard answers.
    fn forwarded(
        &mut self,
        now_us: i64,
        forward: usize,
        child: usize,
        answer: Result<ShardAnswer, Overloaded>,
    ) {
        let f = &mut self.forwards[forward];
        match answer {
            Ok(a) => f.answers[child] = Some(a),
            Err(Overloaded) => f.failed = true,
        }
        if !f.failed && f.answers.iter().any(Option::is_none) {
            return;
        }
        if f.ids.is_empty() {
            return; // answered already (failed before every child answered)
        }
        let answer = match f.failed {
            true => Err(Overloaded),
            false => Ok(f
                .plan
                .answer(f.answers.iter_mut().map(|a| a.take().expect("all")).collect())
                .expect("in order")),
        };
        let (to, object, ids) = (f.to, f.object, std::mem::take(&mut f.ids));
        self.answer_reserve(now_us, to, object, ids, answer);
    }

    fn object(&mut self, shard: Shard) -> usize {
        if let Some(&object) = self.by_shard.get(&shard) {
            return object;
        }
        self.objects.push(ShardObject {
            shard,
            name: shard.name(&self.p.namespace),
            memory: Rc::default(),
            checks: Rc::default(),
            server: Server::default(),
            refused: 0,
        });
        self.by_shard.insert(shard, self.objects.len() - 1);
        self.by_name.insert(shard.name(&self.p.namespace), self.objects.len() - 1);
        self.objects.len() - 1
    }

    /// A call reaches an object: counted, then queued, or refused when too much is queued.
    fn arrive(&mut self, now_us: i64, object: usize, call: Call) {
        let p = self.p;
        let obj = &mut self.objects[object];
        obj.server.count_call(now_us);
        if obj.server.backlog_us(now_us) <= p.overload_us {
            let done = obj.server.queue(now_us, p.call_us + p.per_id_us * call.ids() as i64);
            self.events.push(done, Event::Serve { object, call });
            return;
        }
        obj.refused += 1;
        match call {
            Call::Reserve { to, ids } => self.answer_reserve(now_us, to, object, ids, Err(Overloaded)),
            Call::Check { asker, .. } => {
                let at = now_us + (p.object_round_trip_ms * 500.0) as i64;
                self.events.push(at, Event::Checked { task: asker, answer: Err(Overloaded) });
            }
            // After the response, a confirm or a release is tried again, 100 ms, 200 ms, … later
            // (`after_response::retrying`, here until it is taken).
            Call::Confirm { owner, ids, tries } => {
                let at = now_us + retry_delay_us(tries);
                self.events
                    .push(at, Event::Arrive { object, call: Call::Confirm { owner, ids, tries: tries + 1 } });
            }
            Call::Release { owner, ids, tries } => {
                let at = now_us + retry_delay_us(tries);
                self.events
                    .push(at, Event::Arrive { object, call: Call::Release { owner, ids, tries: tries + 1 } });
            }
        }
    }

    /// The object's turn for a call: the real shard code runs.
    fn serve(&mut self, now_us: i64, object: usize, call: Call) {
        let p = self.p;
        let now_ms = T0_MS + now_us / 1000;
        let obj = &self.objects[object];
        let rules =
            ShardRules { level: obj.shard.level, now_ms, window_ms: p.window_ms, split_above: p.split_above };
        let memory = obj.memory.clone();
        let link = Rc::new(ParentLink::default());
        // The broken rule: a child that does not ask its parent.
        let ask = (obj.shard.level > 0 && !p.broken_rule).then(|| ask_parent(&obj.checks, &link, now_ms));
        let (future, then, ids): (Pin<Box<dyn Future<Output = Done>>>, Then, usize) = match call {
            Call::Reserve { to, ids } => {
                let mut track = to;
                while let ReplyTo::Forward { forward, .. } = track {
                    track = self.forwards[forward].to;
                }
                let ReplyTo::Isolate(track) = track else { unreachable!("a forward comes from an isolate") };
                let owner = self.tracks[track].owner.clone();
                let asked = ids.clone();
                let future = Box::pin(async move {
                    Done::Reserved(reserve_here(&*memory, rules, &owner, &asked, ask).await)
                });
                let n = ids.len();
                (future, Then::Reserve { to, ids }, n)
            }
            Call::Check { ids, asker } => {
                let n = ids.len();
                let future = Box::pin(async move {
                    let held = check_here(&*memory, rules, &ids, ask).await;
                    Done::Checked(held.map(|held| (held, memory.split_at())))
                });
                (future, Then::Child { task: asker }, n)
            }
            Call::Confirm { owner, ids, .. } => {
                memory.confirm(&owner, &ids, now_ms);
                for id in &ids {
                    let first = &mut self.ids.confirmed_us[Ids::number(id) as usize];
                    *first = (*first).min(now_us);
                }
                return;
            }
            Call::Release { owner, ids, .. } => {
                memory.release(&owner, &ids);
                return;
            }
        };
        self.tasks_made += 1;
        let waker = Waker::from(Arc::new(TaskWaker { task: self.tasks_made, woken: self.woken.clone() }));
        self.step(now_us, self.tasks_made, Task { object, ids, future, link, waker, then });
    }

    /// Runs a task until it waits (for its parent: then it asks the parent; or for its turn in a
    /// check) or ends (then it answers); the tasks it woke go on in their object's next turns.
    fn step(&mut self, now_us: i64, id: u64, mut task: Task) {
        let half_object_trip = (self.p.object_round_trip_ms * 500.0) as i64;
        let polled = task.future.as_mut().poll(&mut Context::from_waker(&task.waker));
        match polled {
            Poll::Pending => {
                let asked = task.link.asked.borrow_mut().take();
                let shard = self.objects[task.object].shard;
                self.tasks.insert(id, task);
                if let Some(ids) = asked {
                    let parent = self.object(shard.parent().expect("only a child asks its parent"));
                    let call = Call::Check { ids, asker: id };
                    self.events.push(now_us + half_object_trip, Event::Arrive { object: parent, call });
                }
            }
            Poll::Ready(done) => match (task.then, done) {
                (Then::Reserve { to, ids }, Done::Reserved(answer)) => {
                    if !matches!(answer, Ok(ShardAnswer::Moved))
                        || !self.forward(now_us, task.object, to, &ids)
                    {
                        self.answer_reserve(now_us, to, task.object, ids, answer);
                    }
                }
                (Then::Child { task }, Done::Checked(answer)) => {
                    self.events.push(now_us + half_object_trip, Event::Checked { task, answer });
                }
                _ => unreachable!("a reserve answers an isolate, a check a child"),
            },
        }
        let woken = std::mem::take(&mut *self.woken.lock().expect("one thread"));
        for task in woken {
            let t = &self.tasks[&task];
            let done = self.objects[t.object].server.queue(now_us, self.p.per_id_us * t.ids as i64);
            self.events.push(done, Event::Resume { task });
        }
    }

    /// A shard's answer at the isolate (`accept_events`).
    fn reply(
        &mut self,
        now_us: i64,
        track: usize,
        object: usize,
        ids: Vec<String>,
        answer: Result<ShardAnswer, Overloaded>,
    ) {
        let t = &mut self.tracks[track];
        t.waiting -= 1;
        match answer {
            Ok(ShardAnswer::Moved) => {
                self.isolates[t.isolate].layout.learn_split(&self.objects[object].name);
                self.stats.moved += 1;
                t.moved.extend(ids);
            }
            Ok(answer @ (ShardAnswer::Decided(_) | ShardAnswer::Forwarded(_))) => {
                let placed = match answer {
                    ShardAnswer::Forwarded(f) => {
                        self.stats.forwarded += 1;
                        f
                    }
                    ShardAnswer::Decided(d) => Forwarded::decided_at(&self.objects[object].name, d),
                    ShardAnswer::Moved => unreachable!("matched above"),
                };
                assert_eq!(placed.decisions.len(), ids.len(), "one decision per id");
                let layout = &mut self.isolates[t.isolate].layout;
                placed.split.iter().for_each(|s| layout.learn_split(s));
                let decided_us = now_us - self.isolates[t.isolate].round_trip_us / 2;
                for (id, &decision) in ids.iter().zip(&placed.decisions) {
                    let n = Ids::number(id);
                    t.decisions.push((n, n < t.first_new, decision, decided_us));
                }
                for (at, asked, fresh) in placed.placed(&ids) {
                    let object = self.by_name[&at];
                    if !fresh.is_empty() {
                        t.reserved.push((object, fresh));
                    }
                    t.attempted.push((object, asked));
                }
            }
            Err(Overloaded) => {
                t.failed = true;
                t.attempted.push((object, ids));
            }
        }
        if t.waiting > 0 {
            return;
        }
        if self.p.measured(t.arrived_us) {
            self.stats.max_calls_per_request = self.stats.max_calls_per_request.max(t.calls);
        }
        let at = now_us + self.isolates[t.isolate].round_trip_us / 2;
        if !t.failed && !t.moved.is_empty() && t.rounds < MAX_LEVEL {
            t.rounds += 1;
            let ids = std::mem::take(&mut t.moved);
            self.send_round(now_us, track, ids);
            return;
        }
        if t.failed || !t.moved.is_empty() {
            // A 500: every shard called releases what this request reserved there.
            self.stats.failed_requests += u64::from(self.p.measured(t.arrived_us));
            let owner = t.owner.clone();
            for (object, ids) in std::mem::take(&mut t.attempted) {
                let call = Call::Release { owner: owner.clone(), ids, tries: 0 };
                self.events.push(at, Event::Arrive { object, call });
            }
            t.reserved.clear();
            t.decisions.clear();
            return;
        }
        // Accepted: the fresh events go to the queue, the answer goes out, then the confirms.
        if self.p.measured(t.arrived_us) {
            self.stats.added_ms.push((now_us - t.arrived_us) as f64 / 1000.0);
            self.stats.events_decided += t.events as u64;
        }
        for (n, repeat, decision, decided_us) in std::mem::take(&mut t.decisions) {
            let accepted = &mut self.ids.accepted[n as usize];
            self.stats.repeats += u64::from(repeat);
            match decision {
                Reserved::Fresh => {
                    if *accepted > 0 {
                        self.stats.duplicates_accepted += 1;
                    }
                    *accepted = accepted.saturating_add(1);
                }
                Reserved::Duplicate => {
                    self.stats.duplicates += 1;
                    self.stats.answered_duplicate.push(n);
                }
                Reserved::InFlight => {
                    self.stats.in_flight += 1;
                    // In flight while its first send is: a check's answer may be a trip old.
                    let confirmed_us = self.ids.confirmed_us[n as usize];
                    self.stats.in_flight_after_confirm += u64::from(confirmed_us < decided_us - 1_000_000);
                }
            }
        }
        let owner = t.owner.clone();
        for (object, ids) in std::mem::take(&mut t.reserved) {
            let call = Call::Confirm { owner: owner.clone(), ids, tries: 0 };
            self.events.push(at + self.p.queue_send_us, Event::Arrive { object, call });
        }
        t.attempted.clear();
    }

    pub(super) fn report(self) -> Report {
        let p = self.p;
        let measured = p.measure_from_s..p.duration_ms / 1000;
        let busiest = |range: std::ops::Range<i64>, objects: &[ShardObject]| {
            objects
                .iter()
                .map(|o| (o.server.max_calls_per_second(range.clone()), o.name.clone()))
                .max()
                .unwrap_or_default()
        };
        let (max_calls, busiest_name) = busiest(measured.clone(), &self.objects);
        let (max_calls_ramp, busiest_ramp) = busiest(0..p.measure_from_s, &self.objects);
        let in_use: Vec<&ShardObject> =
            self.objects.iter().filter(|o| o.memory.split_at().is_none()).collect();
        let max_calls_in_use =
            in_use.iter().map(|o| o.server.max_calls_per_second(measured.clone())).max().unwrap_or(0);
        let false_duplicates =
            self.stats.answered_duplicate.iter().filter(|&&n| self.ids.accepted[n as usize] == 0).count()
                as u64;
        if std::env::var("MODEL_TRACE").is_ok() {
            for o in &self.objects {
                let split = o.memory.split_at().map(|at| (at - T0_MS) as f64 / 1000.0);
                eprintln!("{} split at {split:?} s, refused {}: {:?}", o.name, o.refused, o.server.calls());
            }
        }
        Report {
            false_duplicates,
            shards_in_use: in_use.len(),
            objects: self.objects.len(),
            levels: self.objects.iter().map(|o| o.shard.level + 1).max().unwrap_or(0),
            max_calls,
            busiest: busiest_name,
            max_calls_ramp,
            busiest_ramp,
            max_calls_in_use,
            refused_calls: self.objects.iter().map(|o| o.refused).sum(),
            audit: audit_spread(&p.audit, p.seed, p.duration_ms / 1000),
            stats: self.stats,
        }
    }
}
