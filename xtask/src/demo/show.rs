//! What the demo shows once the cluster runs: the objects, the operator's health, and a query
//! of the primary with psql from the PostgreSQL image's root.

use super::*;

impl Demo {
    pub(super) fn show(&self, health_port: u16) -> Result<()> {
        let cluster = self.cluster()?;
        println!("\n$ kubectl get databaseclusters");
        print!(
            "{}",
            self.kubectl(&["get", "databaseclusters", "-n", NAMESPACE])?
        );
        let selector = format!("database.example.com/cluster={CLUSTER}");
        println!("\n$ kubectl get sts,svc,cm,cronjob,pdb,pods,pvc -l {selector}");
        print!(
            "{}",
            self.kubectl(&[
                "get",
                "sts,svc,cm,cronjob,pdb,pods,pvc",
                "-n",
                NAMESPACE,
                "-l",
                &selector,
            ])?
        );
        println!("\nStatus conditions of {NAMESPACE}/{CLUSTER}:");
        let conditions = self.kubectl(&[
            "get",
            "databasecluster",
            CLUSTER,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={range .status.conditions[*]}{.type}{\"\\t\"}{.status}{\"\\t\"}{.reason}{\"\\t\"}{.message}{\"\\n\"}{end}",
        ])?;
        print!(
            "{}",
            columns(&["TYPE", "STATUS", "REASON", "MESSAGE"], &conditions)
        );
        let primary = self.kubectl(&[
            "get",
            "databasecluster",
            CLUSTER,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.primaryPod}",
        ])?;
        println!("Primary: {}", primary.trim());

        println!(
            "\nThe pods above run on process nodes: each is a real PostgreSQL server, a local \
             process listening on its own loopback pod IP (logs in {}/pods/).",
            self.state_dir.display()
        );
        println!("\nTry it yourself (in another terminal):");
        println!("  export KUBECONFIG={}", cluster.kubeconfig().display());
        let kubectl = cluster.kubectl_path();
        println!("  alias kubectl={}", kubectl.display());
        println!(
            "  kubectl patch databasecluster {CLUSTER} --type merge -p '{{\"spec\":{{\"replicas\":5}}}}'"
        );
        println!(
            "  kubectl scale statefulset {CLUSTER} --replicas=1   # the operator puts it back"
        );
        println!(
            "  kubectl delete pod {CLUSTER}-1                      # Degraded, then Running again"
        );
        println!("  kubectl get events --field-selector involvedObject.name={CLUSTER}");
        println!(
            "  chroot {} psql -h <pod IP> -U postgres   # password: the Secret local-postgresql-password",
            self.image_root_hint()
        );
        println!("Operator log:     {}", self.operator_log().display());
        println!("Operator metrics: http://127.0.0.1:{health_port}/metrics");
        println!("Cluster logs:     {}", cluster.logs_dir().display());
        Ok(())
    }

    /// The postgres image root (built the first time, about two minutes; then cached): the
    /// example's pods run from it, and its `psql` is the demo's client.
    pub(super) fn postgres_root(&self) -> Result<PathBuf> {
        let (recipe, _) = ImageTable::recipe_for(POSTGRES_IMAGE)
            .ok_or_else(|| anyhow!("no image recipe serves {POSTGRES_IMAGE}"))?;
        let started = Instant::now();
        self.progress.step(format!(
            "image root for {POSTGRES_IMAGE} (Debian's postgresql-15; built once with mmdebstrap, then cached)"
        ));
        let table = ImageTable::new(images::default_cache_dir()?, None);
        let (root, version) = self
            .progress
            .waiting("the PostgreSQL image root (mmdebstrap)", || {
                table.ensure(recipe)
            })?;
        self.progress.step(format!(
            "PostgreSQL {version} in {} ({:.1}s)",
            root.display(),
            started.elapsed().as_secs_f64()
        ));
        Ok(root)
    }

    fn image_root_hint(&self) -> String {
        images::default_cache_dir()
            .map(|d| format!("{}/postgres-bookworm-*/rootfs", d.display()))
            .unwrap_or_else(|_| "<postgres image root>".into())
    }

    /// Asks the primary (found by its role label) a question with psql, as a client would: the
    /// password from the cluster's Secret, on the primary's pod IP.
    pub(super) fn query(&self, root: &Path) -> Result<()> {
        let ip = self.kubectl(&[
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            &format!("database.example.com/cluster={CLUSTER},database.example.com/role=primary"),
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ])?;
        let ip = ip.trim();
        if ip.is_empty() {
            bail!("no pod of {CLUSTER} is labelled primary");
        }
        let encoded = self.kubectl(&[
            "get",
            "secret",
            "local-postgresql-password",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.data.password}",
        ])?;
        let password = String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded.trim())
                .context("the password Secret is not base64")?,
        )?;
        // Running means every member is Ready; a standby that just became Ready may still be
        // catching up. Give both a few seconds to report `streaming` before asking.
        let streaming = "select count(*) from pg_stat_replication where state = 'streaming'";
        for _ in 0..30 {
            let out = Command::new("chroot")
                .arg(root)
                .args([
                    "psql", "-h", ip, "-U", "postgres", "-d", "postgres", "-XAtc", streaming,
                ])
                .env("PGPASSWORD", &password)
                .env("PGCONNECT_TIMEOUT", "10")
                .output()
                .context("running psql in the postgres image root")?;
            if String::from_utf8_lossy(&out.stdout).trim() == "2" {
                break;
            }
            std::thread::sleep(POLL);
        }
        println!("\n$ psql -h {ip} -U postgres -c \"{QUERY}\"");
        let out = Command::new("chroot")
            .arg(root)
            .args([
                "psql", "-h", ip, "-U", "postgres", "-d", "postgres", "-X", "-c", QUERY,
            ])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .context("running psql in the postgres image root")?;
        if !out.status.success() {
            bail!(
                "psql on the primary {ip} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
        Ok(())
    }
}

/// Tab-separated rows under `header`, aligned.
fn columns(header: &[&str], rows: &str) -> String {
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    table.extend(
        rows.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split('\t').map(str::to_string).collect()),
    );
    let n = header.len();
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            table
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &table {
        let mut line = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = row.get(i).map_or("", String::as_str);
            if i + 1 == n {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::columns;

    #[test]
    fn columns_align_tab_separated_rows() {
        let out = columns(
            &["TYPE", "STATUS", "MESSAGE"],
            "Ready\tTrue\t3/3 replicas ready\nDegraded\tFalse\tok\n",
        );
        assert_eq!(
            out,
            "TYPE       STATUS   MESSAGE\nReady      True     3/3 replicas ready\nDegraded   False    ok\n"
        );
    }
}
