//! Printing plan reports for a terminal.

use super::*;

/// One differing field: `path: live -> desired` on one line when it fits, else the path and
/// then the values; multi-line text as its changed lines.
pub(super) fn render_field(d: &FieldDiff, style: Style) -> Vec<String> {
    let indent = "      ";
    let path = truncate(&d.path, WIDTH - indent.len() - 1);
    if !d.lines.is_empty() {
        let mut out = vec![format!("{indent}{path}:")];
        for line in &d.lines {
            let colour = if line.starts_with('+') {
                Colour::Green
            } else {
                Colour::Red
            };
            let shown = truncate(line, WIDTH - indent.len() - 2);
            out.push(format!("{indent}  {}", style.paint(&shown, Some(colour))));
        }
        return out;
    }
    let live = d.live.as_deref().unwrap_or("(not set)");
    let one_line = format!("{indent}{path}: {live} -> {}", d.desired);
    if one_line.chars().count() <= WIDTH {
        return vec![format!(
            "{indent}{path}: {} -> {}",
            style.paint(live, Some(Colour::Red)),
            style.paint(&d.desired, Some(Colour::Green))
        )];
    }
    let half = (WIDTH - indent.len() - 2 - 4) / 2;
    vec![
        format!("{indent}{path}:"),
        format!(
            "{indent}  {} -> {}",
            style.paint(&truncate(live, half), Some(Colour::Red)),
            style.paint(&truncate(&d.desired, half), Some(Colour::Green))
        ),
    ]
}

/// The plans as text, at most [`WIDTH`] columns a line (pure).
pub fn render_all(reports: &[PlanReport], style: Style) -> String {
    let mut out: Vec<String> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push(String::new());
        }
        let from = if r.source == "live" {
            "the live spec".to_owned()
        } else {
            r.source.clone()
        };
        out.push(truncate(
            &format!(
                "{} {} (from {from}); read-only, nothing was changed",
                style.bold("Plan for DatabaseCluster"),
                r.cluster
            ),
            WIDTH,
        ));
        for note in &r.notes {
            out.push(truncate(&format!("  note: {note}"), WIDTH));
        }
        let width = r
            .objects
            .iter()
            .map(|o| o.object.chars().count())
            .max()
            .unwrap_or(0)
            .min(60);
        for o in &r.objects {
            let colour = match o.change {
                "create" => Some(Colour::Green),
                "update" => Some(Colour::Yellow),
                _ => Some(Colour::Dim),
            };
            let name = truncate(&o.object, width);
            let pad = " ".repeat(width - name.chars().count() + 2);
            out.push(format!("  {name}{pad}{}", style.paint(o.change, colour)));
            for d in &o.diff {
                out.extend(render_field(d, style));
            }
        }
        for d in &r.deletions {
            out.push(format!(
                "  {d}  {}",
                style.paint("delete", Some(Colour::Red))
            ));
        }
        for s in &r.steps {
            out.push(truncate(&format!("  step: {s}"), WIDTH));
        }
        if r.restarts.is_empty() {
            out.push("  pods that would restart: none".to_owned());
        } else {
            out.push(truncate(
                &format!(
                    "  pods to restart, one at a time, the primary last: {}",
                    r.restarts.join(", ")
                ),
                WIDTH,
            ));
            for reason in &r.restart_reasons {
                out.push(truncate(&format!("    because {reason}"), WIDTH));
            }
        }
        out.push(format!("  status: {}", r.status));
        for e in &r.events {
            out.push(truncate(&format!("  event: {e}"), WIDTH));
        }
        let count = |c: &str| r.objects.iter().filter(|o| o.change == c).count();
        out.push(format!(
            "  {} to create, {} to update, {} unchanged, {} to delete",
            count("create"),
            count("update"),
            count("unchanged"),
            r.deletions.len()
        ));
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}
