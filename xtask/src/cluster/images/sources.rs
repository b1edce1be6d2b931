//! The Debian mirrors a root is built from: the ones this machine's apt is configured with.

use std::fs;

use anyhow::{Result, anyhow};

/// The `deb` lines for `suite`, from the mirrors this machine's apt is configured with: the
/// Debian archive (`suite`, `suite-updates`) and the security archive (`suite-security`); `sid`
/// has neither updates nor security.
pub(super) fn debian_sources(suite: &str) -> Result<Vec<String>> {
    let (archive, security) = configured_mirrors()?;
    let mut lines = vec![format!("deb {archive} {suite} main")];
    if suite != "sid" && suite != "unstable" {
        lines.push(format!("deb {archive} {suite}-updates main"));
        if let Some(security) = security {
            lines.push(format!("deb {security} {suite}-security main"));
        }
    }
    Ok(lines)
}

/// The archive and security mirror URIs of the host's apt sources (deb822 `.sources` files and
/// one-line `sources.list`).
fn configured_mirrors() -> Result<(String, Option<String>)> {
    let mut texts = Vec::new();
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(text);
    }
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        for entry in dir.flatten() {
            let path = entry.path();
            let ext = path.extension().and_then(|e| e.to_str());
            if matches!(ext, Some("sources" | "list"))
                && let Ok(text) = fs::read_to_string(&path)
            {
                texts.push(text);
            }
        }
    }
    let mut archive = None;
    let mut security = None;
    for (uri, suites) in texts.iter().flat_map(|t| parse_sources(t)) {
        if suites.iter().any(|s| s.ends_with("-security")) {
            security.get_or_insert(uri);
        } else if !suites.is_empty() {
            archive.get_or_insert(uri);
        }
    }
    let archive = archive.ok_or_else(|| {
        anyhow!("no Debian archive in /etc/apt/sources.list(.d): cannot build image roots")
    })?;
    Ok((archive, security))
}

/// `(uri, suites)` pairs of a sources file in either format.
fn parse_sources(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    // One-line format: `deb [opts] uri suite comp...`.
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("deb ") {
            let mut words = rest.split_whitespace().filter(|w| !w.starts_with('['));
            if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
                out.push((uri.to_owned(), vec![suite.to_owned()]));
            }
        }
    }
    // deb822: stanzas separated by blank lines.
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        };
        let types = field("Types").unwrap_or_default();
        if !types.split_whitespace().any(|t| t == "deb") {
            continue;
        }
        if let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) {
            let suites: Vec<String> = suites.split_whitespace().map(str::to_owned).collect();
            for uri in uris.split_whitespace() {
                out.push((uri.to_owned(), suites.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_in_both_formats_give_archive_and_security_uris() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        let parsed = parse_sources(deb822);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, "http://mirror.example/debian-security");
        let one_line = "deb [arch=amd64] http://m.example/debian bookworm main\n";
        assert_eq!(
            parse_sources(one_line),
            vec![(
                "http://m.example/debian".to_owned(),
                vec!["bookworm".to_owned()]
            )]
        );
    }
}
