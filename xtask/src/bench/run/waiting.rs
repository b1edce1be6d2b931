//! How a run waits: on the watch state with progress every 10 s, on a restarted operator, and
//! through a pause while checking the operator is alive.

use super::*;

pub(super) fn shared_lock(
    shared: &Arc<Mutex<WatchState>>,
) -> std::sync::MutexGuard<'_, WatchState> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn shared_running(shared: &Arc<Mutex<WatchState>>) -> usize {
    shared_lock(shared).running()
}

/// Churned clusters settled on their new spec; with `all_running`, 0 unless every cluster is
/// Running as well.
pub(super) fn settled_count(
    st: &WatchState,
    churned: &[String],
    expected: &HashMap<String, Expected>,
    all_running: bool,
) -> usize {
    if all_running && st.running() < expected.len() {
        return 0;
    }
    churned
        .iter()
        .filter(|name| {
            matches!(
                (st.clusters.get(*name), expected.get(*name)),
                (Some(seen), Some(want)) if seen.settled(want)
            )
        })
        .count()
}

/// Polls until `count(state) >= target`, printing progress every 10 s; false on timeout.
pub(super) fn wait_until(
    op: &mut Operator,
    shared: &Arc<Mutex<WatchState>>,
    timeout: Duration,
    progress: &Progress,
    what: &str,
    target: usize,
    mut count: impl FnMut(&WatchState) -> usize,
) -> Result<bool> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let n = count(&shared_lock(shared));
        if n >= target {
            return Ok(true);
        }
        op.check_alive()?;
        if started.elapsed() >= timeout {
            return Ok(false);
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            progress.step(format!(
                "  {n}/{target} {what} after {:.0}s",
                started.elapsed().as_secs_f64()
            ));
            last_report = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}

/// Starts a second operator process and watches it until it has reconciled every cluster once,
/// plus a tail. Returns it (still running) with the seconds until ready and until every cluster
/// was reconciled (`None` when that did not happen within the wait).
pub(super) fn restart(
    cfg: &RunConfig,
    launch: &Launch,
    kubeconfig: &Path,
    scratch: &Path,
    sampler: &Sampler,
    progress: &Progress,
) -> Result<(Operator, (f64, Option<f64>))> {
    let started = Instant::now();
    let mut op = Operator::start(launch, kubeconfig, &scratch.join("operator-restarted.log"))?;
    let ready_seconds = started.elapsed().as_secs_f64();
    sampler.track(RESTARTED, op.pid());
    progress.step(format!(
        "operator restarted (pid {}), ready after {ready_seconds:.1}s; waiting for a reconcile \
         of every cluster",
        op.pid()
    ));
    let until = Instant::now() + cfg.converge_timeout.min(Duration::from_secs(600));
    let reconciled_all = loop {
        op.check_alive()?;
        if op.scrape()?.reconciles_total() >= cfg.clusters as f64 {
            break Some(started.elapsed().as_secs_f64());
        }
        if Instant::now() >= until {
            break None;
        }
        std::thread::sleep(POLL);
    };
    sleep_checking(&mut op, TAIL)?;
    Ok((op, (ready_seconds, reconciled_all)))
}

pub(super) fn sleep_checking(op: &mut Operator, d: Duration) -> Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        op.check_alive()?;
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
    Ok(())
}
