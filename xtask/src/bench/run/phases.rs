//! The phases of a run, in the order [`run_once`] calls them: startup, convergence, the tail
//! and quiet period, the churn, the restart; and what the watch saw of the operator's
//! reactions.

use super::*;

/// Startup: the operator lists and watches an empty namespace (its webhook served and
/// registered when asked).
pub(super) fn startup(
    cfg: &RunConfig,
    cluster: &LocalCluster,
    scratch: &Path,
    user_kubeconfig: &Path,
    rec: &mut Recorder<'_>,
    progress: &Progress,
) -> Result<(Launch, Operator)> {
    let webhook = if cfg.webhook && cfg.subject == Subject::DatabaseOperator {
        Some(webhook_serving(cluster, scratch)?)
    } else {
        None
    };
    rec.mark("start");
    let launch = Launch {
        subject: cfg.subject,
        bin: cfg.operator_bin.clone(),
        concurrency: cfg.concurrency,
        resync_seconds: cfg.resync_seconds,
        webhook,
        extra: cfg.operator_args.clone(),
    };
    let op = Operator::start(&launch, user_kubeconfig, &scratch.join("operator.log"))?;
    rec.sampler.track("operator", op.pid());
    if let Some(serving) = &launch.webhook {
        register_webhook(cluster, serving)?;
        progress.step(format!(
            "webhooks registered at https://{}/validate and /mutate",
            serving.addr
        ));
    }
    std::thread::sleep(Duration::from_secs(2));
    rec.mark_with_metrics("ready", &op)?;
    Ok((launch, op))
}

/// What the convergence phase measured.
pub(super) struct Converged {
    /// What every cluster should become.
    pub(super) expected: HashMap<String, Expected>,
    /// When the clusters were created, in seconds from the start of the sampling.
    pub(super) create_t: f64,
    pub(super) submit_seconds: f64,
    pub(super) converged: bool,
    pub(super) seconds: Option<f64>,
    /// The control plane's CPU profiles, when taken.
    pub(super) profiles: Option<Vec<pprof::Taken>>,
}

/// Convergence: every Secret and cluster created at once, until every cluster is Running or
/// the timeout.
pub(super) fn converge(
    cfg: &RunConfig,
    cluster: &LocalCluster,
    scratch: &Path,
    epoch: Instant,
    op: &mut Operator,
    rec: &mut Recorder<'_>,
    progress: &Progress,
) -> Result<Converged> {
    let expected: HashMap<String, Expected> = (0..cfg.clusters)
        .map(|i| (workspace_name(i), workload::initial(i)))
        .collect();
    let created = Instant::now();
    let create_t = epoch.elapsed().as_secs_f64();
    rec.mark("create");
    let profiles = match cfg.pprof_seconds {
        Some(seconds) => Some(pprof::Capture::start(
            cluster,
            &scratch.join("pprof"),
            seconds,
        )?),
        None => None,
    };
    create_all(cluster, scratch, cfg.clusters)?;
    let submit_seconds = created.elapsed().as_secs_f64();
    progress.step(format!(
        "created {} Secrets and DatabaseClusters in {submit_seconds:.1}s; waiting for Running",
        cfg.clusters
    ));
    let converged = wait_until(
        op,
        rec.shared,
        cfg.converge_timeout.saturating_sub(created.elapsed()),
        progress,
        "Running",
        cfg.clusters,
        |st| st.running(),
    )?;
    let seconds = converged.then(|| created.elapsed().as_secs_f64());
    rec.mark_with_metrics("converged", op)?;
    match seconds {
        Some(s) => progress.step(format!(
            "all {} clusters Running after {s:.1}s",
            cfg.clusters
        )),
        None => progress.step(format!(
            "timeout: {} of {} clusters Running after {:.0}s",
            shared_running(rec.shared),
            cfg.clusters,
            created.elapsed().as_secs_f64()
        )),
    }
    // The profiles end `--pprof-seconds` after the create; their summaries wait for the end
    // of the run.
    let profiles = profiles.map(pprof::Capture::finish);
    Ok(Converged {
        expected,
        create_t,
        submit_seconds,
        converged,
        seconds,
        profiles,
    })
}

/// The tail after convergence, then the quiet period.
pub(super) fn quiet(
    cfg: &RunConfig,
    op: &mut Operator,
    rec: &mut Recorder<'_>,
    progress: &Progress,
) -> Result<()> {
    std::thread::sleep(TAIL);
    rec.mark_with_metrics("quiet-start", op)?;
    progress.step(format!(
        "quiet period: {}s without changes",
        cfg.quiet.as_secs()
    ));
    sleep_checking(op, cfg.quiet)?;
    rec.mark_with_metrics("quiet-end", op)
}

/// What the churn phase measured.
pub(super) struct Churned {
    pub(super) plan: Vec<(usize, Churn)>,
    pub(super) submit_seconds: f64,
    pub(super) seconds: Option<f64>,
    /// Seconds from the patches until each changed cluster settled.
    pub(super) settle_times: HashMap<String, f64>,
    pub(super) settled_at_end: usize,
}

/// Churn, only on a converged set (changing clusters that never became Running measures
/// nothing): some clusters scaled, some rolled, until they settle on their new spec.
pub(super) fn churn(
    cfg: &RunConfig,
    cluster: &LocalCluster,
    converged: &Converged,
    op: &mut Operator,
    rec: &mut Recorder<'_>,
    progress: &Progress,
) -> Result<Churned> {
    let plan = if converged.converged {
        workload::churn_plan(cfg.clusters)
    } else {
        progress.step("skipping the churn: convergence did not finish");
        Vec::new()
    };
    let mut churn_expected = converged.expected.clone();
    let churned: Vec<String> = plan.iter().map(|(i, _)| workspace_name(*i)).collect();
    for (i, churn) in &plan {
        churn_expected.insert(workspace_name(*i), workload::churn_patch(*i, *churn).1);
    }
    rec.mark("churn");
    let churn_started = Instant::now();
    patch_all(cluster, &plan)?;
    let churn_submit = churn_started.elapsed().as_secs_f64();
    progress.step(format!(
        "patched {} clusters in {churn_submit:.1}s; waiting for them to settle",
        plan.len()
    ));
    let mut settle_times: HashMap<String, f64> = HashMap::new();
    let settled = !plan.is_empty() && {
        let expected = churn_expected.clone();
        let churned = churned.clone();
        wait_until(
            op,
            rec.shared,
            cfg.churn_timeout,
            progress,
            "settled",
            churned.len(),
            |st| {
                for name in &churned {
                    if !settle_times.contains_key(name)
                        && let (Some(seen), Some(want)) =
                            (st.clusters.get(name), expected.get(name))
                        && seen.settled(want)
                    {
                        settle_times.insert(name.clone(), churn_started.elapsed().as_secs_f64());
                    }
                }
                settled_count(st, &churned, &expected, true)
            },
        )?
    };
    let churn_seconds = settled.then(|| churn_started.elapsed().as_secs_f64());
    rec.mark_with_metrics("churned", op)?;
    match churn_seconds {
        Some(s) => progress.step(format!("churn settled after {s:.1}s")),
        None if plan.is_empty() => {}
        None => progress.step("timeout: churn did not settle"),
    }
    let settled_at_end = settled_count(&shared_lock(rec.shared), &churned, &churn_expected, false);
    Ok(Churned {
        plan,
        submit_seconds: churn_submit,
        seconds: churn_seconds,
        settle_times,
        settled_at_end,
    })
}

/// Restart: a new operator process finds every cluster in place, as after a rollout of the
/// operator or a lost lease. It lists every watch, reconciles every cluster once, and must
/// write nothing. A failure here is reported and leaves the phase out; the run's other
/// results stand. Returns the settings of the operator that ran last, both stopped.
pub(super) fn restart_phase(
    cfg: &RunConfig,
    launch: &Launch,
    user_kubeconfig: &Path,
    scratch: &Path,
    mut op: Operator,
    rec: &mut Recorder<'_>,
    progress: &Progress,
) -> (OperatorSettings, Option<Restarted>) {
    rec.mark("restart");
    op.stop(Duration::from_secs(25));
    let restarted = restart(cfg, launch, user_kubeconfig, scratch, rec.sampler, progress);
    rec.mark("restarted");
    let restarted = match restarted {
        Ok((new_op, timing)) => {
            op = new_op;
            let metrics = op.scrape().unwrap_or_default();
            Some((timing, metrics))
        }
        Err(e) => {
            progress.step(format!("restart phase failed, left out of the run: {e:#}"));
            None
        }
    };
    op.stop(Duration::from_secs(25));
    rec.mark("end");
    (op.settings.clone(), restarted)
}

/// How fast the operator reacted to clusters whose pods were all Ready, and when each cluster
/// first ran, in seconds from the create.
pub(super) struct Reactions {
    pub(super) running_lags: Vec<f64>,
    pub(super) first_running: Vec<f64>,
    pub(super) slowest: Vec<(String, f64, f64)>,
}

impl Reactions {
    pub(super) fn read(st: &WatchState, create_t: f64) -> Self {
        let slowest: Vec<(String, f64, f64)> = st
            .slowest_reactions(10)
            .into_iter()
            .map(|(c, lag, at)| (c, lag, at - create_t))
            .collect();
        let mut first_running: Vec<f64> = st
            .first_running
            .values()
            .map(|t| t - create_t)
            .filter(|t| *t >= 0.0)
            .collect();
        first_running.sort_by(f64::total_cmp);
        Self {
            running_lags: st.running_lags(),
            first_running,
            slowest,
        }
    }
}
