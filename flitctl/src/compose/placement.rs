//! A fabric on several machines (docs/compose.md, "Several machines"):
//! `flitctl compose --nodes N` or `--placement FILE` partitions the fabric
//! (flitnet_core::topology::partition) and pins every service of the stack
//! file to one machine with a swarm placement constraint on a node label
//! (`node.labels.flitnet-part == 0`); `fabric.json` says which machine each
//! daemon runs on, so that `flitctl attach` knows the links that cross
//! machines, measures how long crossing takes, and compares it with the
//! propagation delay the links emulate.

use anyhow::{bail, Context, Result};
use flitnet_core::topology::partition::{self, Partition, PartitionSummary};
use flitnet_core::topology::{NodeRef, Topology};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The swarm node label the stack's placement constraints test.
pub const DEFAULT_LABEL: &str = "flitnet-part";

/// `--placement FILE`: the machines, in part order, by the value of their
/// swarm node label.
///
/// ```yaml
/// label: flitnet-part      # optional, the default
/// machines: [rack-a, rack-b]
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementFile {
    #[serde(default = "default_label")]
    pub label: String,
    pub machines: Vec<String>,
}

fn default_label() -> String {
    DEFAULT_LABEL.to_string()
}

/// Label keys and values as a constraint can spell them unquoted.
fn check_word(what: &str, word: &str) -> Result<()> {
    if word.is_empty()
        || !word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        bail!("{what} {word:?}: use letters, digits, '-', '_' and '.' only");
    }
    Ok(())
}

impl PlacementFile {
    pub fn load(path: &Path) -> Result<PlacementFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: PlacementFile = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("parsing placement file {}", path.display()))?;
        file.check()
            .with_context(|| format!("placement file {}", path.display()))?;
        Ok(file)
    }

    fn check(&self) -> Result<()> {
        check_word("label", &self.label)?;
        if self.machines.is_empty() {
            bail!("`machines` lists no machine");
        }
        for (i, m) in self.machines.iter().enumerate() {
            check_word("machine", m)?;
            if self.machines[..i].contains(m) {
                bail!("machine {m:?} is listed twice");
            }
        }
        Ok(())
    }

    /// Machines `0..n` under the default label.
    pub fn numbered(n: usize) -> PlacementFile {
        PlacementFile {
            label: default_label(),
            machines: (0..n).map(|i| i.to_string()).collect(),
        }
    }
}

/// Where every process of a fabric runs.
#[derive(Clone, Debug)]
pub struct Placement {
    pub label: String,
    /// Label value of each machine, in part order.
    pub machines: Vec<String>,
    pub partition: Partition,
    pub summary: PartitionSummary,
    /// Links a random balanced split cuts (best of a few seeds): the
    /// baseline the printed partition is compared with.
    pub random_cut: usize,
    hosts: usize,
}

impl Placement {
    /// Partitions `topo` over the machines of `file`.
    pub fn plan(topo: &Topology, file: PlacementFile) -> Result<Placement> {
        file.check()?;
        let parts = file.machines.len();
        let partition = partition::partition(topo, parts)
            .with_context(|| format!("placing {} on {parts} machines", topo.name))?;
        let summary = partition.summary(topo);
        let random_cut = (0..4)
            .filter_map(|seed| partition::random_balanced(topo, parts, seed).ok())
            .map(|p| p.summary(topo).cut_links)
            .min()
            .unwrap_or(0);
        Ok(Placement {
            label: file.label,
            machines: file.machines,
            partition,
            summary,
            random_cut,
            hosts: topo.hosts.len(),
        })
    }

    /// The machine (label value) `node` runs on.
    pub fn machine_of(&self, node: NodeRef) -> &str {
        let i = match node {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => self.hosts + s as usize,
        };
        &self.machines[self.partition.assignment[i] as usize]
    }

    /// The swarm placement constraint of a service on `machine`.
    pub fn constraint(&self, machine: &str) -> String {
        format!("node.labels.{} == {machine}", self.label)
    }

    /// Most processes on one machine.
    pub fn max_processes(&self) -> usize {
        self.summary.processes.iter().copied().max().unwrap_or(0)
    }

    /// What `flitctl compose` prints: processes per machine, cut links.
    pub fn describe(&self) -> String {
        let s = &self.summary;
        let mut out = format!(
            "placement over {} machines ({}, label {}):\n",
            s.parts,
            s.method.name(),
            self.label
        );
        for (i, m) in self.machines.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {m:>12}: {:>5} processes ({} hosts, {} switches)",
                s.processes[i], s.hosts[i], s.switches[i]
            );
        }
        let _ = write!(
            out,
            "  cut links: {} of {} ({:.1} %); a random balanced split cuts {} ({:.1} %)",
            s.cut_links,
            s.links,
            100.0 * s.cut_share(),
            self.random_cut,
            100.0 * self.random_cut as f64 / s.links.max(1) as f64
        );
        out
    }

    /// Commands that label the swarm's nodes, in machine order.
    pub fn label_commands(&self) -> Vec<String> {
        self.machines
            .iter()
            .map(|m| format!("docker node update --label-add {}={m} <node>", self.label))
            .collect()
    }
}

/// The links of a placed fabric that cross machines, and how long
/// crossing takes against what the links emulate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CutLinks {
    /// Every cut link as `a:port -- b:port (machine-a / machine-b)`.
    pub links: Vec<String>,
    pub count: usize,
    /// Share of all links, 0..=1.
    pub share: f64,
    /// The machine the controller runs on: the one its placement names,
    /// else that of its closest daemons.
    pub controller_machine: String,
    /// Per machine: median one-way delay from the controller to its
    /// daemons (half a control round trip), µs.
    pub machine_one_way_us: Vec<(String, f64)>,
    /// Estimated one-way delay of a cut link (the largest one-way delay to
    /// a machine other than the controller's), µs.
    pub cut_one_way_us: f64,
    /// The same between daemons on one machine, µs.
    pub local_one_way_us: f64,
    /// What a link's propagation delay lasts in wall time (configured
    /// delay × time dilation), µs.
    pub emulated_propagation_us: f64,
    /// True when crossing machines takes longer than the emulated
    /// propagation: cut links are slower than configured.
    pub slower_than_emulated: bool,
    /// The time dilation that would make the emulated propagation cover
    /// the real crossing delay, when `slower_than_emulated`.
    pub suggested_time_dilation: Option<u32>,
}

impl CutLinks {
    /// Lists the cut links of `topo` given each node's machine (node
    /// order), and judges the measured delays: `rtt_us[i]` is the median
    /// control round trip from the controller to daemon i (None: not
    /// measured). `controller_machine` is where the controller is placed;
    /// None: the machine of its closest daemons. Placed, it is never
    /// guessed, since two machines that share a kernel (a second engine
    /// on one host) are a few µs apart, less than the timing noise.
    pub fn judge(
        topo: &Topology,
        machine_of: &[String],
        controller_machine: Option<&str>,
        rtt_us: &[Option<f64>],
        propagation_ns: u64,
        time_dilation: u32,
    ) -> CutLinks {
        let index = |n: NodeRef| match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => topo.hosts.len() + s as usize,
        };
        let links: Vec<String> = topo
            .links
            .iter()
            .filter(|l| machine_of[index(l.a.node)] != machine_of[index(l.b.node)])
            .map(|l| {
                format!(
                    "{} ({} / {})",
                    topo.link_text(l),
                    machine_of[index(l.a.node)],
                    machine_of[index(l.b.node)]
                )
            })
            .collect();
        let mut machines: Vec<String> = machine_of.to_vec();
        machines.sort();
        machines.dedup();
        let median = |mut v: Vec<f64>| -> Option<f64> {
            if v.is_empty() {
                return None;
            }
            v.sort_by(f64::total_cmp);
            Some(v[v.len() / 2])
        };
        let machine_one_way_us: Vec<(String, f64)> = machines
            .iter()
            .filter_map(|m| {
                let rtts: Vec<f64> = machine_of
                    .iter()
                    .zip(rtt_us)
                    .filter(|(mm, _)| *mm == m)
                    .filter_map(|(_, r)| *r)
                    .collect();
                median(rtts).map(|r| (m.clone(), r / 2.0))
            })
            .collect();
        let (controller_machine, local) = match controller_machine {
            Some(c) => machine_one_way_us
                .iter()
                .find(|(m, _)| m == c)
                .cloned()
                .unwrap_or((c.to_string(), 0.0)),
            None => machine_one_way_us
                .iter()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .cloned()
                .unwrap_or_default(),
        };
        let cut = machine_one_way_us
            .iter()
            .filter(|(m, _)| *m != controller_machine)
            .map(|(_, d)| *d)
            .fold(0.0, f64::max);
        let emulated = propagation_ns as f64 * time_dilation.max(1) as f64 / 1000.0;
        let slower = !links.is_empty() && cut > emulated;
        let suggested = slower.then(|| {
            let per_ns = (cut * 1000.0 / propagation_ns.max(1) as f64).ceil() as u32;
            per_ns.max(time_dilation + 1)
        });
        CutLinks {
            count: links.len(),
            share: links.len() as f64 / topo.links.len().max(1) as f64,
            links,
            controller_machine,
            machine_one_way_us,
            cut_one_way_us: cut,
            local_one_way_us: local,
            emulated_propagation_us: emulated,
            slower_than_emulated: slower,
            suggested_time_dilation: suggested,
        }
    }
}

impl std::fmt::Display for CutLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "  machines    {} links cross machines ({:.1} % of all); one-way delay on one machine {:.0} us, across machines {:.0} us; links emulate {:.0} us",
            self.count,
            100.0 * self.share,
            self.local_one_way_us,
            self.cut_one_way_us,
            self.emulated_propagation_us
        )?;
        for (m, d) in &self.machine_one_way_us {
            writeln!(f, "              controller -> {m}: {d:.0} us one way")?;
        }
        if let Some(n) = self.suggested_time_dilation {
            writeln!(
                f,
                "  cut links   slower than emulated: crossing takes {:.0} us, the links emulate {:.0} us; try --time-dilation {n}",
                self.cut_one_way_us, self.emulated_propagation_us
            )?;
        }
        for l in &self.links {
            writeln!(f, "  cut link    {l}")?;
        }
        Ok(())
    }
}

/// Median control round trip from the controller to every daemon of an
/// attached fabric (`PINGS` pings each, on one connection), µs; None for a
/// daemon that does not answer.
pub fn control_round_trips(fabric: &crate::fabric::Fabric, count: usize) -> Vec<Option<f64>> {
    use flitnet_core::control::Request;
    (0..count)
        .map(|i| {
            let mut client = fabric.client(i).ok()?;
            client.call_ok(Request::Ping).ok()?; // connection warm
            let mut rtts: Vec<f64> = (0..PINGS)
                .filter_map(|_| {
                    let t = std::time::Instant::now();
                    client.call_ok(Request::Ping).ok()?;
                    Some(t.elapsed().as_secs_f64() * 1e6)
                })
                .collect();
            rtts.sort_by(f64::total_cmp);
            rtts.get(rtts.len() / 2).copied()
        })
        .collect()
}

/// Pings per daemon when timing the crossing between machines.
pub const PINGS: usize = 9;

/// For `flitctl attach`: when `fabric.json` places daemons on several
/// machines, lists the cut links and times the machines' crossing.
pub fn cut_links_of(
    fabric: &crate::fabric::Fabric,
    description: &crate::compose::ComposeFabric,
) -> Option<CutLinks> {
    let machine_of: Vec<String> = description
        .daemons
        .iter()
        .map(|d| d.machine.clone())
        .collect::<Option<Vec<_>>>()?;
    let rtt = control_round_trips(fabric, machine_of.len());
    Some(CutLinks::judge(
        &description.topology,
        &machine_of,
        description.controller_machine.as_deref(),
        &rtt,
        description.params.propagation_ns,
        description.params.time_dilation,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flitnet_core::topology::generators::kary_ntree;

    #[test]
    fn placement_files_are_checked() {
        let ok: PlacementFile = serde_yaml_ng::from_str("machines: [a, b-2]").unwrap();
        assert_eq!(ok.label, DEFAULT_LABEL);
        assert!(ok.check().is_ok());
        for bad in [
            "machines: []",
            "machines: [a, a]",
            "machines: ['a b']",
            "label: 'x y'\nmachines: [a]",
        ] {
            let f: PlacementFile = serde_yaml_ng::from_str(bad).unwrap();
            assert!(f.check().is_err(), "{bad}");
        }
        assert!(serde_yaml_ng::from_str::<PlacementFile>("machine: [a]").is_err());
    }

    #[test]
    fn a_plan_pins_every_node_and_describes_the_cut() {
        let topo = kary_ntree(4, 2).unwrap();
        let p = Placement::plan(&topo, PlacementFile::numbered(2)).unwrap();
        let on = |m: &str| topo.nodes().filter(|&n| p.machine_of(n) == m).count();
        assert_eq!((on("0"), on("1")), (12, 12));
        assert_eq!(p.constraint("1"), "node.labels.flitnet-part == 1");
        let text = p.describe();
        assert!(text.contains("cut links: 8 of 32 (25.0 %)"), "{text}");
        assert!(p.random_cut > 8, "{text}");
    }

    #[test]
    fn the_stack_file_pins_every_service_and_fabric_json_names_its_machine() {
        use crate::compose::{generate, ComposeOptions};
        use serde_yaml_ng::Value;
        let topo = kary_ntree(4, 2).unwrap();
        let file = PlacementFile {
            label: "rack".into(),
            machines: vec!["a".into(), "b".into()],
        };
        let placement = Placement::plan(&topo, file).unwrap();
        let opts = ComposeOptions {
            token: "0123456789abcdef".into(),
            dns_peers: true,
            placement: Some(placement),
            ..ComposeOptions::default()
        };
        let bundle = generate(&topo, &opts).unwrap();
        let stack: Value = serde_yaml_ng::from_str(&bundle.stack_yaml).unwrap();
        let constraint = |service: &str| {
            stack["services"][service]["deploy"]["placement"]["constraints"][0]
                .as_str()
                .map(str::to_string)
        };
        let mut on = std::collections::BTreeMap::<String, usize>::new();
        for d in &bundle.fabric.daemons {
            let machine = d.machine.clone().expect("every daemon is placed");
            assert_eq!(
                constraint(&d.service),
                Some(format!("node.labels.rack == {machine}")),
                "{}",
                d.service
            );
            *on.entry(machine).or_default() += 1;
        }
        assert_eq!(on.values().copied().collect::<Vec<_>>(), vec![12, 12]);
        assert_eq!(
            constraint("controller").as_deref(),
            Some("node.labels.rack == a")
        );
        // Each daemon's configuration travels as a swarm config; only the
        // controller mounts the bundle directory.
        let first = bundle.fabric.daemons[0].service.as_str();
        let h0 = &stack["services"][first];
        assert_eq!(h0["configs"][0]["source"].as_str(), Some(first));
        assert_eq!(
            h0["configs"][0]["target"].as_str(),
            Some(format!("/etc/flitnet/{first}.json").as_str())
        );
        assert!(h0["volumes"].is_null(), "{h0:?}");
        assert_eq!(
            stack["configs"][first]["file"].as_str(),
            Some(format!("./configs/{first}.json").as_str())
        );
        assert!(stack["services"]["controller"]["volumes"][0]
            .as_str()
            .is_some_and(|v| v.starts_with("./configs:")));
        // Plain Compose runs on one machine: no constraints there.
        assert!(!bundle.compose_yaml.contains("constraints"));
        assert_eq!(bundle.fabric.controller_machine.as_deref(), Some("a"));
        // fabric.json round-trips the machines.
        let json = serde_json::to_string(&bundle.fabric).unwrap();
        let back: crate::compose::ComposeFabric = serde_json::from_str(&json).unwrap();
        assert_eq!(back, bundle.fabric);
    }

    #[test]
    fn cut_links_slower_than_emulated_suggest_a_dilation() {
        let topo = kary_ntree(2, 1).unwrap(); // one switch, two hosts
        let machines = vec!["a".to_string(), "b".to_string(), "a".to_string()];
        // Daemons on `a` answer in 40 us, on `b` in 400 us: the controller
        // is on `a`, crossing takes 200 us one way.
        let rtt = [Some(40.0), Some(400.0), Some(40.0)];
        let cut = CutLinks::judge(&topo, &machines, None, &rtt, 10_000, 1);
        assert_eq!(cut.count, 1);
        assert_eq!(cut.controller_machine, "a");
        assert_eq!(cut.cut_one_way_us, 200.0);
        assert!(cut.slower_than_emulated);
        assert_eq!(cut.suggested_time_dilation, Some(20));
        assert!(cut.to_string().contains("try --time-dilation 20"));
        // The same fabric at ×25 covers it.
        let cut = CutLinks::judge(&topo, &machines, None, &rtt, 10_000, 25);
        assert!(!cut.slower_than_emulated);
        assert_eq!(cut.suggested_time_dilation, None);
        // Placed on `b`, the controller is on `b` however the delays fall:
        // crossing to `a` is then 20 us.
        let cut = CutLinks::judge(&topo, &machines, Some("b"), &rtt, 10_000, 1);
        assert_eq!(cut.controller_machine, "b");
        assert_eq!(cut.local_one_way_us, 200.0);
        assert_eq!(cut.cut_one_way_us, 20.0);
    }
}
