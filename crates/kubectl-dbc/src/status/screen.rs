//! The status screen: one cluster's report as text, at most [`WIDTH`] columns a line.

use super::*;

/// The LAG column: `0s` or `>=5s` for a replica, `stopped` when it does not replicate, `-` for
/// a primary, `unknown` (dim) when its server did not answer the operator's last probe.
fn lag_cell(m: &MemberReport) -> Cell {
    match (m.server_role.as_deref(), m.replicating, m.lag_seconds) {
        (None, _, _) => Cell::coloured("unknown".to_owned(), Some(Colour::Dim)),
        (Some("primary"), _, _) => Cell::plain("-".to_owned()),
        (Some(_), Some(false), _) => Cell::coloured("stopped".to_owned(), Some(Colour::Red)),
        (Some(_), _, Some(0) | None) => Cell::coloured("0s".to_owned(), Some(Colour::Green)),
        (Some(_), _, Some(secs)) => Cell::coloured(
            format!(">={secs}s"),
            Some(if secs >= 30 {
                Colour::Red
            } else {
                Colour::Yellow
            }),
        ),
    }
}

fn phase_colour(phase: Option<&str>) -> Option<Colour> {
    match phase {
        Some("Running") => Some(Colour::Green),
        Some("Degraded") | Some("Failed") => Some(Colour::Red),
        Some(_) => Some(Colour::Yellow),
        None => None,
    }
}

fn when(now: Timestamp, t: Timestamp) -> String {
    let rel = age(now, t);
    let rel = if rel.starts_with("in ") {
        rel
    } else {
        format!("{rel} ago")
    };
    format!("{} ({rel})", t.strftime("%Y-%m-%d %H:%M:%SZ"))
}

/// The roll in progress: where it stands, then what it waits for or why it is paused.
fn upgrade_lines(u: &UpgradeReport, style: Style) -> Vec<String> {
    const INDENT: &str = "              ";
    let mut step = format!("  upgrade     {} -> {}: {}", u.from, u.to, u.step);
    if let Some(member) = &u.member {
        step.push_str(&format!(" {member}"));
    }
    if !u.members_done.is_empty() {
        step.push_str(&format!(", done {}", u.members_done.join(" ")));
    }
    let mut lines = vec![truncate(&step, WIDTH)];
    let room = WIDTH - INDENT.len();
    if let Some(why) = &u.paused_reason {
        let text = truncate(&format!("paused: {why}"), room);
        lines.push(format!("{INDENT}{}", style.paint(&text, Some(Colour::Red))));
    } else if let Some(waiting) = &u.waiting {
        let text = truncate(waiting, room);
        lines.push(format!(
            "{INDENT}{}",
            style.paint(&text, Some(Colour::Yellow))
        ));
    }
    lines
}

/// One cluster's screen: at most [`WIDTH`] columns per line (pure). The header, the members,
/// the backups, the conditions and the events, with a blank line between the parts.
pub fn render(report: &StatusReport, now: Timestamp, style: Style) -> String {
    let parts = [
        header_lines(report, style),
        member_lines(report, style),
        backup_lines(report, now, style),
        condition_lines(report, now, style),
        event_lines(report, now, style),
    ];
    let mut text = parts.map(|lines| lines.join("\n")).join("\n\n");
    text.push('\n');
    text
}

/// The cluster's name, engine, phase and readiness, its primary, versions, upgrade and
/// generation.
fn header_lines(report: &StatusReport, style: Style) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let phase = report.phase.as_deref();
    let ready_colour = if report.ready_replicas >= report.replicas {
        Colour::Green
    } else {
        Colour::Yellow
    };
    let title = truncate(
        &format!("{}/{}", report.namespace, report.name),
        WIDTH.saturating_sub(50),
    );
    out.push(format!(
        "{}  {} {}  {}  {}",
        style.bold(&title),
        report.engine,
        report.version,
        style.paint(phase.unwrap_or("no phase yet"), phase_colour(phase)),
        style.paint(
            &format!("{}/{} ready", report.ready_replicas, report.replicas),
            Some(ready_colour)
        ),
    ));
    let primary = match &report.primary {
        Some(p) => style.bold(p),
        None => style.paint("none", Some(Colour::Red)),
    };
    out.push(format!("  primary     {primary}"));
    out.push(format!(
        "  version     spec {}, running {}",
        report.version,
        report.current_version.as_deref().unwrap_or("not known yet")
    ));
    if let Some(u) = &report.upgrade {
        out.extend(upgrade_lines(u, style));
    }
    let generation = match (report.generation, report.observed_generation) {
        (Some(g), Some(o)) if g == o => format!("{g} (observed)"),
        (Some(g), Some(o)) => format!("{g} (operator has seen {o})"),
        (Some(g), None) => format!("{g} (not observed yet)"),
        (None, _) => "unknown".to_owned(),
    };
    out.push(format!("  generation  {generation}"));
    out
}

/// The members' table, or that there is no pod yet.
fn member_lines(report: &StatusReport, style: Style) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let rows: Vec<Vec<Cell>> = report
        .members
        .iter()
        .map(|m| {
            let role = m.role.clone().unwrap_or_else(|| "-".to_owned());
            let role_colour = (role == "primary").then_some(Colour::Green);
            vec![
                Cell::name(&m.name),
                Cell::coloured(role, role_colour),
                Cell::coloured(
                    match (m.ready, m.state.as_str()) {
                        (true, _) => "yes".to_owned(),
                        (false, "Running") => "no".to_owned(),
                        (false, state) => format!("no, {state}"),
                    },
                    Some(if m.ready { Colour::Green } else { Colour::Red }),
                ),
                Cell::plain(m.version.clone().unwrap_or_else(|| "-".to_owned())),
                lag_cell(m),
                Cell::coloured(
                    m.restarts.to_string(),
                    (m.restarts > 0).then_some(Colour::Yellow),
                ),
                Cell::plain(m.node.clone().unwrap_or_else(|| "-".to_owned())),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push("  no database pods yet".to_owned());
    } else {
        out.extend(table(
            2,
            &[
                "MEMBER", "ROLE", "READY", "VERSION", "LAG", "RESTARTS", "NODE",
            ],
            &rows,
            28,
            style,
        ));
    }
    out
}

/// The backup schedule, the next and last backups and the last verified restore.
fn backup_lines(report: &StatusReport, now: Timestamp, style: Style) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = &report.backup;
    match &b.schedule {
        Some(schedule) => {
            out.push(truncate(
                &format!(
                    "  backups     \"{schedule}\", keep {}, to s3://{}",
                    b.retention.unwrap_or_default(),
                    b.bucket.as_deref().unwrap_or("")
                ),
                WIDTH,
            ));
            out.push(format!(
                "    next                   {}",
                b.next
                    .map_or_else(|| "not scheduled yet".to_owned(), |t| when(now, t))
            ));
        }
        None => out.push("  backups     off (no spec.backup)".to_owned()),
    }
    let dim = |t: Option<Timestamp>| match t {
        Some(t) => when(now, t),
        None => style.paint(NOT_REPORTED, Some(Colour::Dim)),
    };
    let size = b
        .last_size_bytes
        .map(|s| format!(", {}", human_bytes(s)))
        .unwrap_or_default();
    let count = b.count.map(|n| format!(", {n} stored")).unwrap_or_default();
    out.push(format!(
        "    last                   {}{size}{count}",
        dim(b.last)
    ));
    let failed = match &b.failed_drill {
        Some(job) => format!(
            " ({})",
            style.paint(&format!("newest drill {job} failed"), Some(Colour::Red))
        ),
        None => String::new(),
    };
    out.push(format!(
        "    last verified restore  {}{failed}",
        dim(b.last_verified_restore)
    ));
    out
}

/// The conditions' table, or that there is none yet.
fn condition_lines(report: &StatusReport, now: Timestamp, style: Style) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if report.conditions.is_empty() {
        out.push("  no conditions yet".to_owned());
    } else {
        let rows: Vec<Vec<Cell>> = report
            .conditions
            .iter()
            .map(|c| {
                let good = match c.type_.as_str() {
                    "Degraded" | "Upgrading" | "FailoverBlocked" => c.status == "False",
                    _ => c.status == "True",
                };
                vec![
                    Cell::plain(&c.type_),
                    Cell::coloured(
                        &c.status,
                        Some(if good { Colour::Green } else { Colour::Yellow }),
                    ),
                    Cell::plain(&c.reason),
                    Cell::plain(age(now, c.last_transition_time)),
                    Cell::plain(&c.message),
                ]
            })
            .collect();
        out.extend(table(
            2,
            &["CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"],
            &rows,
            24,
            style,
        ));
    }
    out
}

/// The events' table, or that there is none.
fn event_lines(report: &StatusReport, now: Timestamp, style: Style) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if report.events.is_empty() {
        out.push("  no events (events expire after an hour by default)".to_owned());
    } else {
        let rows: Vec<Vec<Cell>> = report
            .events
            .iter()
            .map(|e| {
                let count = if e.count > 1 {
                    format!(" (x{})", e.count)
                } else {
                    String::new()
                };
                vec![
                    Cell::plain(e.time.map_or_else(|| "-".to_owned(), |t| age(now, t))),
                    Cell::coloured(&e.type_, (e.type_ == "Warning").then_some(Colour::Yellow)),
                    Cell::plain(&e.reason),
                    Cell::plain(format!("{}{count}", e.message)),
                ]
            })
            .collect();
        out.extend(table(
            2,
            &["EVENT", "TYPE", "REASON", "MESSAGE"],
            &rows,
            24,
            style,
        ));
    }
    out
}

/// Every cluster's screen, separated by a blank line (pure).
pub fn render_all(reports: &[StatusReport], now: Timestamp, style: Style) -> String {
    reports
        .iter()
        .map(|r| render(r, now, style))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `bytes` in the largest binary unit that keeps it at 1 or more (`812 B`, `3.4 MiB`).
fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes.max(0) as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
