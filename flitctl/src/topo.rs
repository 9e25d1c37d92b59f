//! `flitctl topo`: show, generate, convert and import topologies.
//!
//! Files are read by extension: `.net` / `.ibnet` as ibnetdiscover / ibsim
//! net files, anything else as flitnet YAML (either form, see
//! docs/topology.md).

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use flitnet_core::topology::generators::generate;
use flitnet_core::topology::summary::Summary;
use flitnet_core::topology::{dot, ibnet, Family, HostKind, PgftParams, Topology};
use std::path::{Path, PathBuf};
use tracing::debug;

#[derive(Subcommand, Debug)]
pub enum TopoCommand {
    /// Print a summary: host, switch and link counts, switches per level,
    /// port use per radix, and the host-to-host diameter.
    Show {
        /// Topology file: flitnet YAML (generator or explicit form), or an
        /// ibnetdiscover / ibsim net file (`.net`).
        file: PathBuf,
    },
    /// Convert a topology file to another format.
    Export {
        /// Topology file: flitnet YAML, or an ibnetdiscover / ibsim `.net` file.
        file: PathBuf,
        #[command(flatten)]
        out: Output,
    },
    /// Generate a topology from a family and its parameters.
    Gen {
        #[command(subcommand)]
        family: GenFamily,
    },
    /// Convert an ibnetdiscover / ibsim net file to flitnet YAML (explicit form).
    Import {
        /// The net file, e.g. the output of `ibnetdiscover`.
        file: PathBuf,
        /// Write here instead of standard output.
        #[arg(short, long, value_name = "OUT")]
        output: Option<PathBuf>,
    },
}

/// Output formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// flitnet YAML, explicit form (every switch, host and link).
    Yaml,
    /// ibnetdiscover / ibsim net file (1-based ports, flitnet's GUIDs and LIDs).
    #[value(alias = "ibnet", alias = "net")]
    Ibnetdiscover,
    /// Graphviz DOT (render with `dot -Tsvg`).
    Dot,
}

/// Where and how to write a topology.
#[derive(Args, Debug)]
pub struct Output {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
}

/// Options every generator takes.
#[derive(Args, Debug)]
pub struct GenCommon {
    /// Name of the topology (default: from the family and parameters).
    #[arg(long)]
    pub name: Option<String>,
    /// NIDs of storage hosts, comma-separated, e.g. `3,7,11` (for Gdmodk; docs/topology.md).
    #[arg(long, value_delimiter = ',', value_name = "NIDS")]
    pub storage: Vec<u32>,
    #[command(flatten)]
    pub out: Output,
}

#[derive(Subcommand, Debug)]
pub enum GenFamily {
    /// k-ary n-tree (docs/topology.md): k^n hosts, n·k^(n-1) switches of radix 2k.
    KaryNtree {
        /// Arity: down ports (= up ports) per switch, at least 2.
        #[arg(long)]
        k: u32,
        /// Number of switch levels, at least 1.
        #[arg(long)]
        n: u32,
        #[command(flatten)]
        common: GenCommon,
    },
    /// Parallel-ports generalized fat-tree PGFT(h; m; w; p) (docs/topology.md).
    Pgft {
        /// Children per switch at each level, comma-separated (h entries).
        #[arg(long, value_delimiter = ',', required = true)]
        m: Vec<u32>,
        /// Parents per node at each level, comma-separated (h entries).
        #[arg(long, value_delimiter = ',', required = true)]
        w: Vec<u32>,
        /// Parallel links between linked nodes at each level, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        p: Vec<u32>,
        #[command(flatten)]
        common: GenCommon,
    },
    /// Reduced unidirectional fat-tree (docs/topology.md): one-way links, k inputs
    /// and k outputs per switch, exactly one path per host pair.
    Ruft {
        /// Arity, at least 2.
        #[arg(long)]
        k: u32,
        /// Number of stages, at least 1.
        #[arg(long)]
        n: u32,
        #[command(flatten)]
        common: GenCommon,
    },
    /// n-dimensional mesh, one host per router.
    Mesh {
        /// Routers per dimension, comma-separated, e.g. `8,8`.
        #[arg(long, value_delimiter = ',', required = true)]
        dims: Vec<u32>,
        #[command(flatten)]
        common: GenCommon,
    },
    /// n-dimensional torus (mesh with wraparound), one host per router.
    Torus {
        /// Routers per dimension, comma-separated, e.g. `3,3,3`.
        #[arg(long, value_delimiter = ',', required = true)]
        dims: Vec<u32>,
        #[command(flatten)]
        common: GenCommon,
    },
    /// Binary hypercube, one host per router.
    Hypercube {
        /// Dimension: 2^d routers.
        #[arg(long)]
        d: u32,
        #[command(flatten)]
        common: GenCommon,
    },
}

impl GenFamily {
    fn split(self) -> (Family, GenCommon) {
        match self {
            GenFamily::KaryNtree { k, n, common } => (Family::KaryNTree { k, n }, common),
            GenFamily::Pgft { m, w, p, common } => (Family::Pgft(PgftParams { m, w, p }), common),
            GenFamily::Ruft { k, n, common } => (Family::Ruft { k, n }, common),
            GenFamily::Mesh { dims, common } => (Family::Mesh { dims }, common),
            GenFamily::Torus { dims, common } => (Family::Torus { dims }, common),
            GenFamily::Hypercube { d, common } => (Family::Hypercube { d }, common),
        }
    }
}

/// Reads a topology file: `.net` / `.ibnet` as ibnetdiscover, else YAML.
/// Errors start with the file name.
pub fn load(path: &Path) -> Result<Topology> {
    let is_net = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("net" | "ibnet")
    );
    let topo = if is_net {
        ibnet::load_ibnet(path)?.topology
    } else {
        Topology::load(path)?
    };
    debug!(
        file = %path.display(),
        hosts = topo.num_hosts(),
        switches = topo.num_switches(),
        links = topo.links.len(),
        "loaded topology"
    );
    Ok(topo)
}

/// `topo` in `format`.
pub fn render(topo: &Topology, format: Format) -> Result<String> {
    Ok(match format {
        Format::Yaml => topo.to_yaml(),
        Format::Ibnetdiscover => ibnet::to_ibnet(topo)?,
        Format::Dot => dot::to_dot(topo),
    })
}

fn emit(text: &str, output: Option<&Path>) -> Result<()> {
    match output {
        Some(path) => {
            std::fs::write(path, text)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            debug!(file = %path.display(), bytes = text.len(), "wrote");
        }
        None => print!("{text}"),
    }
    Ok(())
}

pub fn run(cmd: TopoCommand) -> Result<()> {
    match cmd {
        TopoCommand::Show { file } => {
            let topo = load(&file)?;
            print!("{}", Summary::of(&topo));
        }
        TopoCommand::Export { file, out } => {
            let topo = load(&file)?;
            let text = render(&topo, out.format).with_context(|| file.display().to_string())?;
            emit(&text, out.output.as_deref())?;
        }
        TopoCommand::Gen { family } => {
            let (family, common) = family.split();
            let mut topo = generate(&family)?;
            if let Some(name) = common.name {
                topo.name = name;
            }
            for nid in common.storage {
                let count = topo.num_hosts();
                let host = topo.hosts.get_mut(nid as usize).with_context(|| {
                    format!("--storage: there is no host with NID {nid} (NIDs are 0..{count})")
                })?;
                host.kind = HostKind::Storage;
            }
            let text = render(&topo, common.out.format).with_context(|| topo.name.clone())?;
            emit(&text, common.out.output.as_deref())?;
        }
        TopoCommand::Import { file, output } => {
            let topo = ibnet::load_ibnet(&file)?.topology;
            emit(&topo.to_yaml(), output.as_deref())?;
        }
    }
    Ok(())
}
