//! When cold keys go to the backend (pure: the caller passes the time in). A cold key while no
//! other cold evaluation is in flight goes at once, alone, so one new ScaledObject, or a client
//! asking one at a time, waits for nothing. A cold key that arrives while one is in flight (a
//! burst: a scaler start, KEDA asking for the whole fleet) opens a gathering window: every cold
//! key arriving in it joins, by group (its namespace). A group that fills a query is sent at once;
//! when the window ends, the rest goes in group order, cut into queries. So a burst costs one
//! query per full batch plus a few per window, instead of one per key, and each key waits at most
//! the window. (Two other rules were tried with tests/scaler/test_restart.py: closing a window
//! early once keys stop arriving gave batches of 1, 3, 6, 12 … for a client whose calls trickle
//! in; "quiet" as "nothing sent for a window" made a client asking one key at a time wait a
//! window for each.)
//!
//! Why groups: a query's namespace matcher is what the backend's index search starts from, so a
//! batch cut in arrival order (KEDA's scale loops ask in no order) names a namespace per key and
//! makes VictoriaMetrics search every named namespace's series. Measured at 50,000 ScaledObjects
//! in 100 namespaces, each query on clusters no earlier query named: 100 keys from 100 namespaces
//! cost 0.265 CPU s, from 12 (a window cut in namespace order) 0.100, from one 0.034
//! (docs/benchmarks.md, 2026-12-04).
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to do with a key that just arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<T> {
    /// Send these now (the key alone, or a group that just filled a query); call
    /// [`Gathering::done`] when their evaluation has ended.
    Send(Vec<T>),
    /// The key opened window `generation`: call [`Gathering::closes_at`] and [`Gathering::close`]
    /// until it is sent.
    Opened(u64),
    /// The key joined the open window.
    Joined,
}

#[derive(Debug)]
pub struct Gathering<G, T> {
    window: Duration,
    /// Most keys in one batch (one query's worth).
    limit: usize,
    /// The open window's keys by group, in group order.
    pending: BTreeMap<G, Vec<T>>,
    /// The open window: its generation and when it opened.
    open: Option<(u64, Instant)>,
    generation: u64,
    /// Cold evaluations sent and not done.
    in_flight: usize,
}

impl<G: Ord, T> Gathering<G, T> {
    /// `window` zero sends every key alone, at once.
    pub fn new(window: Duration, limit: usize) -> Self {
        Self {
            window,
            limit: limit.max(1),
            pending: BTreeMap::new(),
            open: None,
            generation: 0,
            in_flight: 0,
        }
    }

    pub fn arrive(&mut self, group: G, key: T, now: Instant) -> Arrival<T> {
        if self.open.is_some() {
            let keys = self.pending.entry(group).or_default();
            keys.push(key);
            if keys.len() >= self.limit {
                let full = std::mem::take(keys);
                self.in_flight += 1;
                return Arrival::Send(full);
            }
            return Arrival::Joined;
        }
        if self.in_flight == 0 || self.window.is_zero() || self.limit == 1 {
            self.in_flight += 1;
            return Arrival::Send(vec![key]);
        }
        self.generation += 1;
        self.pending.entry(group).or_default().push(key);
        self.open = Some((self.generation, now));
        Arrival::Opened(self.generation)
    }

    /// When window `generation` closes; `None` once it was sent.
    pub fn closes_at(&self, generation: u64) -> Option<Instant> {
        let (open, opened) = self.open?;
        (open == generation).then(|| opened + self.window)
    }

    /// The batches of window `generation` when it is due at `now`: its keys in group order, cut
    /// into queries (none when every group went full before).
    pub fn close(&mut self, generation: u64, now: Instant) -> Option<Vec<Vec<T>>> {
        let at = self.closes_at(generation)?;
        if now < at {
            return None;
        }
        self.open = None;
        let mut batches: Vec<Vec<T>> = Vec::new();
        for key in std::mem::take(&mut self.pending).into_values().flatten() {
            match batches.last_mut() {
                Some(batch) if batch.len() < self.limit => batch.push(key),
                _ => batches.push(vec![key]),
            }
        }
        self.in_flight += batches.len();
        Some(batches)
    }

    /// One sent evaluation has ended.
    pub fn done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_lone_key_goes_at_once_and_a_burst_gathers() {
        let t = Instant::now();
        let mut g = Gathering::new(200 * MS, 100);
        assert_eq!(g.arrive("ns", 1, t), Arrival::Send(vec![1]));
        // While it is in flight: a window opens, and keys arriving in it join.
        assert_eq!(g.arrive("ns", 2, t + MS), Arrival::Opened(1));
        for (i, key) in (3..10).enumerate() {
            assert_eq!(
                g.arrive("ns", key, t + (2 + 5 * i as u32) * MS),
                Arrival::Joined
            );
        }
        assert_eq!(g.closes_at(1), Some(t + 201 * MS));
        assert_eq!(g.close(1, t + 200 * MS), None);
        assert_eq!(g.close(1, t + 201 * MS), Some(vec![(2..10).collect()]));
        assert_eq!(g.closes_at(1), None);
        // Both evaluations done: the next key goes alone, at once.
        g.done();
        assert_eq!(g.arrive("ns", 10, t + 202 * MS), Arrival::Opened(2));
        g.done();
        assert_eq!(g.close(2, t + 402 * MS), Some(vec![vec![10]]));
        g.done();
        assert_eq!(g.arrive("ns", 11, t + 403 * MS), Arrival::Send(vec![11]));
        // A client asking one key at a time never waits.
        g.done();
        assert_eq!(g.arrive("ns", 12, t + 404 * MS), Arrival::Send(vec![12]));
    }

    #[test]
    fn a_group_that_fills_a_query_goes_at_once_and_the_window_stays_open() {
        let t = Instant::now();
        let mut g = Gathering::new(200 * MS, 3);
        g.arrive("a", 0, t);
        assert_eq!(g.arrive("a", 1, t), Arrival::Opened(1));
        assert_eq!(g.arrive("b", 2, t), Arrival::Joined);
        assert_eq!(g.arrive("a", 3, t), Arrival::Joined);
        // Group a's third key: a's batch goes; b's key waits for the window.
        assert_eq!(g.arrive("a", 4, t), Arrival::Send(vec![1, 3, 4]));
        assert_eq!(g.arrive("a", 5, t + MS), Arrival::Joined);
        assert_eq!(g.close(1, t + 200 * MS), Some(vec![vec![5, 2]]));
        assert_eq!(g.close(1, t + 500 * MS), None);
        assert_eq!(g.arrive("a", 6, t + 201 * MS), Arrival::Opened(2));
    }

    /// KEDA asks in no order: keys of many namespaces interleave. The window's batches are cut
    /// in namespace order, so each names as few namespaces as the keys allow.
    #[test]
    fn a_window_is_cut_into_queries_in_group_order() {
        let t = Instant::now();
        let mut g = Gathering::new(200 * MS, 5);
        g.arrive(0, 0, t);
        for key in 1..=10 {
            // Groups 1, 2, 0, 1, 2, 0 …: no group fills a query of 5.
            g.arrive((key % 3) as u32, key, t);
        }
        let batches = g.close(1, t + 200 * MS).unwrap();
        assert_eq!(batches, [vec![3, 6, 9, 1, 4], vec![7, 10, 2, 5, 8]]);
        // Each batch is one evaluation in flight, on top of the first key's.
        for _ in 0..batches.len() {
            g.done();
        }
        assert_eq!(g.arrive(0, 11, t + 300 * MS), Arrival::Opened(2));
        g.done();
        assert_eq!(g.close(2, t + 500 * MS), Some(vec![vec![11]]));
        g.done();
        assert_eq!(g.arrive(0, 12, t + 600 * MS), Arrival::Send(vec![12]));
    }

    #[test]
    fn no_window_sends_every_key_alone() {
        let t = Instant::now();
        let mut g = Gathering::new(Duration::ZERO, 100);
        for key in 0..5 {
            assert_eq!(g.arrive(key % 2, key, t), Arrival::Send(vec![key]));
        }
    }
}
