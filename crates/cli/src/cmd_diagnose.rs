//! `vantage diagnose TARGET`: runs the diagnostic bundle from this host to a vantage
//! endpoint (idle and loaded RTT with one-way loss, TCP and small UDP each way) and
//! weighs it into a verdict with ranked suspects, each with its evidence for and
//! against and a fix (pathdiag's idea, Mathis et al., PAM 2008). With a target
//! (`--target-rate`, `--target-rtt`) it also says whether the path meets it and
//! what TCP needs to: the window and the loss budget.
//!
//! `vantage diagnose SRC DST --server URL` asks the server instead: it traces the
//! path between the two agents, measures it end to end and between each pair of
//! consecutive measurement points on it, and weighs it all the same way
//! (`POST /api/v1/diagnose`); progress is printed as the job goes.
//!
//! Exit status: 0 healthy, 2 degraded, 3 unreachable, 1 when it could not run.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{Map, Value};
use vantage_analysis::diagnosis::{apps, diagnose, Observations, SegmentObservation};
use vantage_model::diagnosis::{DiagnoseRequest, Diagnosis, PathDirection, Verdict};
use vantage_model::kinds::diagnose::{
    self as kind, DEFAULT_PROBES, DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT,
    DEFAULT_SMALL_UDP_BYTES, DEFAULT_SMALL_UDP_DURATION, DEFAULT_SMALL_UDP_MAX_RATE,
    DEFAULT_TCP_DURATION, DEFAULT_TCP_OMIT,
};
use vantage_model::kinds::{Spec, Target, ENDPOINT_PORT};
use vantage_model::units::format_rate_bps;

use crate::cmd_latency::{duration_arg, print_json, print_stdout};
use crate::cmd_throughput::rate_arg;
use crate::connection::{OptionalServer, ServerConnection};

/// What this host is called in the answer.
const THIS_HOST: &str = "this host";

#[derive(Args, Debug)]
#[command(
    mut_arg("server", |arg| arg.help("Ask this server (URL) to diagnose the path between two of its agents")),
    mut_arg("token", |arg| arg.help("Bearer token for `--server` (role publisher or admin)")),
)]
pub struct DiagnoseArgs {
    /// A `vantage endpoint` to diagnose the path to from this host: HOST or HOST:PORT
    /// (default port 7862). With `--server`: the source and destination agents, SRC DST.
    #[arg(value_name = "TARGET | SRC DST", num_args = 1..=2, required = true)]
    points: Vec<String>,
    #[command(flatten)]
    server: OptionalServer,
    /// With `--server`: measure end to end only, not between the measurement points.
    #[arg(long)]
    no_segments: bool,
    /// The rate the application needs (BPS, e.g. 200M): the verdict says whether the
    /// path carries it, and the window and loss budget TCP needs for it.
    #[arg(long, value_name = "BPS", value_parser = rate_arg)]
    target_rate: Option<u64>,
    /// The round-trip time the application needs at most (DUR, e.g. 30ms).
    #[arg(long, value_name = "DUR", value_parser = duration_arg)]
    target_rtt: Option<Duration>,
    /// The application whose needs are the target: a video profile of Rufini et al.
    /// (youtube-360p … youtube-1080p, h264-1080p, mpeg2-720p) or the gigabit
    /// tele-therapy app of Bazan-Antequera et al. (ptaas-kinect, 200 Mbit/s);
    /// --target-rate / --target-rtt override its figures.
    #[arg(long, value_name = "PROFILE", value_parser = app_arg)]
    app: Option<String>,
    /// Idle round-trip probes (TWAMP-Light).
    #[arg(long, value_name = "N", default_value = DEFAULT_PROBES)]
    probes: u64,
    /// Time between round-trip probes, idle and under load (DUR).
    #[arg(long, value_name = "DUR", default_value = DEFAULT_PROBE_INTERVAL)]
    probe_interval: String,
    /// A probe unanswered after this long is lost (DUR).
    #[arg(long, value_name = "DUR", default_value = DEFAULT_PROBE_TIMEOUT)]
    probe_timeout: String,
    /// TCP transfer each way (DUR).
    #[arg(long, value_name = "DUR", default_value = DEFAULT_TCP_DURATION)]
    tcp_duration: String,
    /// Start of each transfer left out (DUR).
    #[arg(long, value_name = "DUR", default_value = DEFAULT_TCP_OMIT)]
    tcp_omit: String,
    /// Payload of the small UDP datagrams (bytes).
    #[arg(long, value_name = "N", default_value = DEFAULT_SMALL_UDP_BYTES)]
    small_udp_bytes: u64,
    /// Small UDP datagrams each way (DUR).
    #[arg(long, value_name = "DUR", default_value = DEFAULT_SMALL_UDP_DURATION)]
    small_udp_duration: String,
    /// Most the small datagrams are sent at (BPS); they go at 1.5 × the TCP rate.
    #[arg(long, value_name = "BPS", default_value = DEFAULT_SMALL_UDP_MAX_RATE)]
    small_udp_max_rate: String,
    /// Print the diagnosis as JSON (the `POST /api/v1/diagnose` contract).
    #[arg(long)]
    json: bool,
}

impl DiagnoseArgs {
    /// The options as a `diagnose` test spec, checked by the test kind.
    fn spec_values(&self) -> Result<Map<String, Value>, String> {
        let given: Map<String, Value> = [
            ("probes", Value::from(self.probes)),
            ("probe_interval", Value::from(self.probe_interval.clone())),
            ("probe_timeout", Value::from(self.probe_timeout.clone())),
            ("tcp_duration", Value::from(self.tcp_duration.clone())),
            ("tcp_omit", Value::from(self.tcp_omit.clone())),
            ("small_udp_bytes", Value::from(self.small_udp_bytes)),
            (
                "small_udp_duration",
                Value::from(self.small_udp_duration.clone()),
            ),
            (
                "small_udp_max_rate",
                Value::from(self.small_udp_max_rate.clone()),
            ),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
        kind::KIND.normalise("", &given).map_err(|errors| {
            errors
                .iter()
                .map(|error| {
                    format!(
                        "--{}: {}",
                        error.path.trim_start_matches('.').replace('_', "-"),
                        error.message
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

fn fail(message: String) -> ExitCode {
    eprintln!("vantage diagnose: {message}");
    ExitCode::FAILURE
}

pub fn run(args: DiagnoseArgs) -> ExitCode {
    match (args.server.connection(), args.points.as_slice()) {
        (Some(connection), [source, destination]) => {
            let request = DiagnoseRequest {
                source: source.clone(),
                destination: destination.clone(),
                target_rate_bps: args.target_rate,
                target_rtt_us: args.target_rtt.map(|rtt| rtt.as_micros() as u64),
                app: args.app.clone(),
                segments: !args.no_segments,
            };
            match tokio::runtime::Runtime::new() {
                Ok(runtime) => match runtime.block_on(ask_server(&connection, &request)) {
                    Ok(diagnosis) => report(&args, &diagnosis),
                    Err(message) => fail(message),
                },
                Err(error) => fail(format!("cannot start the runtime: {error}")),
            }
        }
        (Some(_), _) => {
            fail("with --server, name the source and destination agents: SRC DST".to_string())
        }
        (None, [target]) => run_local(&args, target),
        (None, _) => {
            fail("two points (SRC DST) need --server: from this host, name one TARGET".to_string())
        }
    }
}

/// Starts the job and follows it, printing each new progress line to stderr.
async fn ask_server(
    connection: &ServerConnection,
    request: &DiagnoseRequest,
) -> Result<Diagnosis, String> {
    let client = connection.client()?;
    let start_url = connection.url("/api/v1/diagnose");
    let job = connection
        .call(client.post(&start_url).json(request), &start_url)
        .await?;
    let id = job["id"]
        .as_str()
        .ok_or("the server's answer names no job")?
        .to_string();
    eprintln!("vantage diagnose: job {id}");
    let mut shown = 0;
    let deadline = tokio::time::Instant::now() + FOLLOW_LIMIT;
    loop {
        let job_url = connection.url(&format!("/api/v1/diagnose/{id}"));
        let job = connection.call(client.get(&job_url), &job_url).await?;
        let progress = job["progress"].as_array().cloned().unwrap_or_default();
        for line in progress.iter().skip(shown) {
            eprintln!("vantage diagnose: {}", line.as_str().unwrap_or_default());
        }
        shown = shown.max(progress.len());
        match job["state"].as_str() {
            Some("done") => {
                return serde_json::from_value(job["result"].clone())
                    .map_err(|error| format!("unreadable diagnosis: {error}"))
            }
            Some("failed") => {
                return Err(job["error"]
                    .as_str()
                    .unwrap_or("the job failed")
                    .to_string())
            }
            _ if tokio::time::Instant::now() > deadline => {
                return Err(format!(
                    "job {id} still running after {} s; follow it at /api/v1/diagnose/{id}",
                    FOLLOW_LIMIT.as_secs()
                ))
            }
            _ => tokio::time::sleep(FOLLOW_POLL).await,
        }
    }
}

/// How long the CLI follows a server's job, and how often it asks.
const FOLLOW_LIMIT: Duration = Duration::from_secs(900);
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// Prints the diagnosis; the exit status says the verdict.
fn report(args: &DiagnoseArgs, diagnosis: &Diagnosis) -> ExitCode {
    let printed = if args.json {
        print_json("diagnose", diagnosis)
    } else {
        print_stdout("diagnose", &render(diagnosis))
    };
    if printed != ExitCode::SUCCESS {
        return printed;
    }
    match diagnosis.verdict {
        Verdict::Healthy => ExitCode::SUCCESS,
        Verdict::Degraded => ExitCode::from(2),
        Verdict::Unreachable => ExitCode::from(3),
    }
}

fn run_local(args: &DiagnoseArgs, target_text: &str) -> ExitCode {
    let target = match Target::parse(target_text, Some(ENDPOINT_PORT)) {
        Ok(target) => target,
        Err(message) => return fail(message),
    };
    let values = match args.spec_values() {
        Ok(values) => values,
        Err(message) => return fail(message),
    };
    let spec = match kind::engine_spec(&Spec::new(&kind::KIND, &values), &target) {
        Ok(spec) => spec,
        Err(error) => return fail(format!("--{error}")),
    };
    if let Some(estimate) = (kind::KIND.estimate)(&Spec::new(&kind::KIND, &values)) {
        eprintln!(
            "vantage diagnose: measuring {target_text} both ways (about {:.0} s)…",
            estimate.as_secs_f64().ceil()
        );
    }
    let result = vantage_probe::diagnose::run_diagnostic(&spec);
    // Parts that could not run say why; the verdict weighs what did.
    for error in result
        .idle_error
        .iter()
        .map(|error| format!("idle probes: {error}"))
        .chain(result.forward.errors.iter().map(|e| format!("forward {e}")))
        .chain(result.reverse.errors.iter().map(|e| format!("reverse {e}")))
    {
        eprintln!("vantage diagnose: {error}");
    }
    let mut request = DiagnoseRequest {
        source: THIS_HOST.to_string(),
        destination: target_text.to_string(),
        target_rate_bps: args.target_rate,
        target_rtt_us: args.target_rtt.map(|rtt| rtt.as_micros() as u64),
        app: args.app.clone(),
        segments: false,
    };
    if let Err(error) = apps::apply(&mut request) {
        return fail(error.to_string());
    }
    let observations = Observations {
        request,
        path: vec![THIS_HOST.to_string(), target_text.to_string()],
        segments: vec![SegmentObservation {
            from: THIS_HOST.to_string(),
            to: target_text.to_string(),
            end_to_end: true,
            run_id: None,
            result,
        }],
        trace: None,
        previous_trace: None,
        agent_addresses: Default::default(),
        tests_run: Vec::new(),
    };
    report(args, &diagnose(&observations))
}

fn direction_text(direction: PathDirection) -> &'static str {
    match direction {
        PathDirection::Forward => "forward",
        PathDirection::Reverse => "reverse",
        PathDirection::Both => "both directions",
    }
}

/// The diagnosis as a few lines: verdict, what was measured, then each suspect with
/// its evidence for and against and its fix.
fn render(diagnosis: &Diagnosis) -> String {
    let target = &diagnosis.target;
    let verdict = match diagnosis.verdict {
        Verdict::Healthy => "healthy",
        Verdict::Degraded => "degraded",
        Verdict::Unreachable => "unreachable",
    };
    let mut out = format!("{} → {}: {verdict}\n", target.source, target.destination);
    let rate = |bps: Option<f64>| bps.map_or_else(|| "-".to_string(), format_rate_bps);
    out += &format!(
        "  measured   forward {}, reverse {}, RTT {}\n",
        rate(target.forward_bps),
        rate(target.reverse_bps),
        target
            .rtt_us
            .map_or_else(|| "-".to_string(), |rtt| format!("{:.3} ms", rtt / 1e3))
    );
    if let Some(met) = target.met {
        let wanted: Vec<String> = [
            target
                .target_rate_bps
                .map(|bps| format_rate_bps(bps as f64)),
            target
                .target_rtt_us
                .map(|rtt| format!("RTT within {:.1} ms", rtt as f64 / 1e3)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let app = target
            .app
            .as_ref()
            .map_or(String::new(), |app| format!("{app}: "));
        out += &format!(
            "  target     {app}{}: {}\n",
            wanted.join(", "),
            if met { "met" } else { "not met" }
        );
        for (need, value) in &target.needs {
            out += &format!("             needs {need} = {value:.3e}\n");
        }
    }
    if diagnosis.suspects.is_empty() && diagnosis.verdict != Verdict::Unreachable {
        out += "  no suspect: nothing limited the path beyond what its line carries\n";
    }
    for (rank, suspect) in diagnosis.suspects.iter().enumerate() {
        out += &format!(
            "  {}. {} at {}, {} (confidence {:.2})\n",
            rank + 1,
            suspect.cause.as_str(),
            suspect.segment,
            direction_text(suspect.direction),
            suspect.confidence
        );
        for evidence in &suspect.evidence {
            out += &format!(
                "       {:<8} {} {} = {:.4} (expected {})\n",
                if evidence.supports { "for" } else { "against" },
                evidence.test,
                evidence.metric,
                evidence.value,
                evidence.expected
            );
        }
        out += &format!("       fix: {}\n", suspect.fix);
    }
    out
}

/// An application profile name, checked against the known ones.
fn app_arg(text: &str) -> Result<String, String> {
    apps::profile(text)
        .map(|profile| profile.name.to_string())
        .map_err(|error| error.to_string())
}
