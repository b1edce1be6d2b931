//! Installing Debian packages a command needs (mmdebstrap for image roots, shellcheck for the
//! script tests) on a machine that lacks them, as `cargo xtask` already provisions the control
//! plane: the README's two commands must work on a fresh machine.

use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

/// One install at a time: apt takes a lock, and two threads asking for the same package should
/// not both run it.
static APT: Mutex<()> = Mutex::new(());

/// Whether `command` runs (`command --version` exits 0).
pub fn have_command(command: &str) -> bool {
    Command::new(command)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `apt-get install -y --no-install-recommends <packages>`, after `apt-get update` when the
/// first try cannot find a package (a fresh machine has no package lists yet). Needs root.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let _guard = APT.lock().unwrap_or_else(|p| p.into_inner());
    if install(packages).is_ok() {
        return Ok(());
    }
    let update = Command::new("apt-get")
        .args(["update", "-qq"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .context("running apt-get update (is apt available, and are we root?)")?;
    if !update.success() {
        bail!("apt-get update failed ({update}); cannot install {}", packages.join(" "));
    }
    install(packages)
}

fn install(packages: &[&str]) -> Result<()> {
    let out = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .context("running apt-get install")?;
    if !out.status.success() {
        bail!(
            "apt-get install {} failed: {}",
            packages.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
