//! Light runs handed out without a row each (`light_handouts`, migration 0015).
//!
//! A thousand-agent latency mesh every minute hands out 16 650 runs a second. Stored as
//! a row each when handed out, read again to check its upload and updated with its
//! result, they were three of every four row writes the archive made, and SQLite's one
//! writer fell behind. Now the light runs one fetch hands out are one row: the window of
//! nominal starts it placed and a compact document of its runs (what a task's runs
//! share once, each claimed resource named once). A run that reports gets no row in
//! `runs` either: its result (`results`, by run id) says how it went, and the archive
//! reads the run from its hand-out, with its result's state and times, wherever runs are
//! asked for: an upload's check, an agent's resynchronisation, the runs a planning pass
//! places around, the runs API. A row per reported run, with its three index entries,
//! was half of what a fleet's results wrote. Once every run of a hand-out is overdue the
//! planner sweeps it ([`Archive::sweep_handouts`]): the runs without a result by then are
//! stored as missed, rows of their own, and the hand-out is kept, as the record of its
//! reported runs, until retention deletes it; the planner mark [`SWEPT_UNTIL`] says
//! which hand-outs are swept.

use std::borrow::Cow;

use vantage_scheduler::current_run_id;

use super::*;

mod cache;

pub(super) use cache::{HandOutCache, HANDOUT_CACHE_BYTES};

/// A hand-out's runs as stored in `light_handouts.runs`. Its text fields borrow from
/// the text it is read from (or, written, from the runs it is made of): an upload's
/// check reads the hand-outs around it, a thousand runs each, for the few it carries,
/// and a string copied for every run read was most of what reading them cost. Its runs
/// may be left as text (`Run` = `&RawValue`), to be decoded only when asked for.
#[derive(Serialize, Deserialize)]
struct Document<'a, Run = HandedRun<'a>> {
    #[serde(borrow)]
    tasks: Vec<TaskPart<'a>>,
    #[serde(borrow)]
    resources: Vec<Cow<'a, str>>,
    runs: Vec<Run>,
}

/// What every run of one task shares.
#[derive(Serialize, Deserialize)]
struct TaskPart<'a> {
    #[serde(borrow)]
    task: Cow<'a, str>,
    #[serde(borrow)]
    test: Cow<'a, str>,
    #[serde(borrow)]
    test_name: Cow<'a, str>,
    spec: SharedSpec,
    priority: i64,
    reverse: bool,
}

/// One run, as a JSON array: its task (an index into `tasks`), id, server, external
/// target, claims (an index into `resources` and the mode), planned start and end.
#[derive(Serialize, Deserialize)]
struct HandedRun<'a>(
    usize,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    Option<String>,
    Vec<(usize, ClaimMode)>,
    i64,
    i64,
);

/// Margin around an upload's measured times within which its run's hand-out is looked
/// for first: an agent starts a run at its planned start, give or take its start
/// tolerance (0.5 s) and its clock. An agent's hand-outs are a minute of a mesh each,
/// about 140 KiB at a thousand agents; with a minute's margin each upload read two or three of
/// them for its 10-20 runs. A run outside it (a clock minutes off) is found by reading
/// all of the agent's hand-outs.
const LOOKUP_MARGIN_US: i64 = 5_000_000;

fn encode(runs: &[RunRecord]) -> String {
    let mut tasks: Vec<TaskPart> = Vec::new();
    let mut resources: Vec<Cow<str>> = Vec::new();
    let mut resource_index: HashMap<&str, usize> = HashMap::new();
    let mut handed = Vec::with_capacity(runs.len());
    for run in runs {
        let task = match tasks.iter().position(|part| {
            part.task == run.task
                && part.test_name == run.test_name
                && part.test == run.test
                && part.spec == run.spec
                && part.priority == run.priority
                && part.reverse == run.reverse
        }) {
            Some(index) => index,
            None => {
                tasks.push(TaskPart {
                    task: Cow::Borrowed(&run.task),
                    test: Cow::Borrowed(&run.test),
                    test_name: Cow::Borrowed(&run.test_name),
                    spec: run.spec.clone(),
                    priority: run.priority,
                    reverse: run.reverse,
                });
                tasks.len() - 1
            }
        };
        let claims = run
            .claims
            .iter()
            .map(|claim| {
                let index = *resource_index
                    .entry(claim.resource.as_str())
                    .or_insert_with(|| {
                        resources.push(Cow::Borrowed(&claim.resource));
                        resources.len() - 1
                    });
                (index, claim.mode)
            })
            .collect();
        handed.push(HandedRun(
            task,
            Cow::Borrowed(&run.id),
            Cow::Borrowed(&run.server),
            run.target.clone(),
            claims,
            run.planned_start_us,
            run.planned_end_us,
        ));
    }
    to_json_text(&Document {
        tasks,
        resources,
        runs: handed,
    })
}

/// A hand-out document, or part of one, decoded from `text`.
fn decode_json<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, ArchiveError> {
    serde_json::from_str(text).map_err(|source| ArchiveError::Json {
        what: "light hand-out",
        source,
    })
}

impl TaskPart<'_> {
    fn into_owned(self) -> TaskPart<'static> {
        TaskPart {
            task: Cow::Owned(self.task.into_owned()),
            test: Cow::Owned(self.test.into_owned()),
            test_name: Cow::Owned(self.test_name.into_owned()),
            spec: self.spec,
            priority: self.priority,
            reverse: self.reverse,
        }
    }
}

impl<Run> Document<'_, Run> {
    /// Its run `run` of `client`, as handed out (dispatched).
    fn run(&self, client: &str, run: &HandedRun) -> Result<RunRecord, ArchiveError> {
        let corrupt = |what: &str| ArchiveError::CorruptHandOut {
            client: client.to_string(),
            what: what.to_string(),
        };
        let HandedRun(task, id, server, target, claims, start_us, end_us) = run;
        let part = self
            .tasks
            .get(*task)
            .ok_or_else(|| corrupt("a run names a task it does not hold"))?;
        let claims = claims
            .iter()
            .map(|&(resource, mode)| {
                Ok(Claim {
                    resource: self
                        .resources
                        .get(resource)
                        .ok_or_else(|| corrupt("a claim names a resource it does not hold"))?
                        .to_string(),
                    mode,
                })
            })
            .collect::<Result<Vec<Claim>, ArchiveError>>()?;
        Ok(RunRecord {
            exclusive: claims
                .iter()
                .any(|claim| claim.mode == ClaimMode::Exclusive),
            id: id.to_string(),
            task: part.task.to_string(),
            test: part.test.to_string(),
            test_name: part.test_name.to_string(),
            client: client.to_string(),
            server: server.to_string(),
            target: target.clone(),
            spec: part.spec.clone(),
            reverse: part.reverse,
            priority: part.priority,
            claims,
            planned_start_us: *start_us,
            planned_end_us: *end_us,
            actual_start_us: None,
            actual_end_us: None,
            state: RunState::Dispatched,
            reason: None,
        })
    }
}

/// Planner mark: every hand-out whose runs all end by this time (`reach_us`) is swept.
/// A fetch hands out runs that have not started, never ones past the miss grace, so a
/// hand-out stored later never ends before it.
pub const SWEPT_UNTIL: &str = "handouts_swept_until";

/// The SQL value of [`SWEPT_UNTIL`], or the earliest time before the first sweep.
pub(super) fn swept_until_sql() -> String {
    format!(
        "COALESCE((SELECT value FROM planner_state WHERE name = '{SWEPT_UNTIL}'), {})",
        i64::MIN
    )
}

/// Most hand-outs one pass sweeps (about a thousand runs each at a thousand agents):
/// the rest wait for the next pass, so that one sweep after the server fell behind does
/// not hold the writer for all of them at once.
const SWEPT_AT_ONCE: usize = 64;

/// Every state a row in `runs` can have, as an SQL list, named so that a read of an
/// agent's runs by planned start follows `runs_client_state` (client, state, planned
/// start) as one range per state rather than every run the agent ever had.
fn every_state_sql() -> String {
    RunState::ALL
        .map(|state| format!("'{}'", state.as_str()))
        .join(", ")
}

/// Per agent, the first and last planned start of the runs asked about.
type Spans<'a> = BTreeMap<&'a str, (i64, i64)>;

/// Widens `client`'s span in `spans` to hold `[first_start_us, last_start_us]`.
fn widen<'a>(spans: &mut Spans<'a>, client: &'a str, first_start_us: i64, last_start_us: i64) {
    let span = spans
        .entry(client)
        .or_insert((first_start_us, last_start_us));
    span.0 = span.0.min(first_start_us);
    span.1 = span.1.max(last_start_us);
}

/// The `runs` text of hand-out rows.
fn texts_of_rows(rows: &[AnyRow]) -> Vec<(String, String)> {
    rows.iter()
        .map(|row| (row.get("client"), row.get("runs")))
        .collect()
}

/// The runs of hand-out rows read as `client, runs` that `keep` keeps, judged on the
/// compact form (id, planned start and end) before a record is made of each: a batch of
/// uploads needs a few runs of hand-outs of a thousand.
fn runs_of_rows(
    rows: &[AnyRow],
    keep: impl Fn(&str, i64, i64) -> bool,
) -> Result<Vec<RunRecord>, ArchiveError> {
    let mut runs = Vec::new();
    for (client, text) in texts_of_rows(rows) {
        let document: Document = decode_json(&text)?;
        for run in &document.runs {
            if keep(&run.1, run.5, run.6) {
                runs.push(document.run(&client, run)?);
            }
        }
    }
    Ok(runs)
}

/// The ids of the runs of hand-out rows read as `runs`, in their current form
/// ([`current_run_id`]): a hand-out made before an upgrade holds its runs too.
fn ids_of_rows(rows: &[AnyRow]) -> Result<HashSet<String>, ArchiveError> {
    let mut ids = HashSet::new();
    for (_, text) in texts_of_rows(rows) {
        let document: Document = decode_json(&text)?;
        ids.extend(
            document
                .runs
                .into_iter()
                .map(|run| current_run_id(&run.1).into_owned()),
        );
    }
    Ok(ids)
}

impl Archive {
    /// Hands out `runs`, light runs placed for `client`'s nominal starts in
    /// `[from_us, until_us)`, as one hand-out, and stores the `non_starts` of that
    /// placement as rows and `marks`, in one transaction. Returns the runs handed out:
    /// none when another fetch handed out this window first, and never a run an
    /// earlier hand-out holds (after a replan lowered the agent's mark).
    pub async fn hand_out_light_runs(
        &self,
        client: &str,
        (from_us, until_us): (i64, i64),
        runs: Vec<RunRecord>,
        non_starts: &[RunRecord],
        marks: &[(&str, i64)],
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        const DOING: &str = "handing out runs";
        let mut tx = self.write_transaction().await.map_err(sql(DOING))?;
        let earlier = sqlx::query(
            "SELECT client, runs FROM light_handouts WHERE client = $1 AND until_us > $2",
        )
        .bind(client)
        .bind(from_us)
        .fetch_all(&mut *tx)
        .await
        .map_err(sql(DOING))?;
        let held = ids_of_rows(&earlier)?;
        let runs: Vec<RunRecord> = runs
            .into_iter()
            .filter(|run| !held.contains(&run.id))
            .collect();
        if let (Some(first_start_us), Some(reach_us)) = (
            runs.iter().map(|run| run.planned_start_us).min(),
            runs.iter().map(|run| run.planned_end_us).max(),
        ) {
            let done = sqlx::query(
                "INSERT INTO light_handouts (client, from_us, until_us, first_start_us, reach_us, runs) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (client, from_us) DO NOTHING",
            )
            .bind(client)
            .bind(from_us)
            .bind(until_us)
            .bind(first_start_us)
            .bind(reach_us)
            .bind(encode(&runs))
            .execute(&mut *tx)
            .await
            .map_err(sql(DOING))?;
            if done.rows_affected() == 0 {
                // Another fetch of this agent handed this window out first; dropping
                // the transaction rolls it back.
                return Ok(Vec::new());
            }
        }
        insert_run_rows(&mut tx, self.backend, non_starts, now_us()).await?;
        for &(name, value) in marks {
            set_mark(&mut tx, name, value).await?;
        }
        tx.commit().await.map_err(sql(DOING))?;
        Ok(runs)
    }

    /// The handed-out runs `uploads` name, by id; each upload's agent is its client.
    pub(super) async fn handed_out_for(
        &self,
        uploads: &[&ResultUpload],
    ) -> Result<HashMap<String, RunRecord>, ArchiveError> {
        let mut by_agent: BTreeMap<&str, Vec<&ResultUpload>> = BTreeMap::new();
        for upload in uploads {
            by_agent.entry(&upload.agent).or_default().push(upload);
        }
        let mut found = HashMap::new();
        for (agent, uploads) in by_agent {
            let wanted: HashSet<&str> = uploads.iter().map(|u| u.run_id.as_str()).collect();
            let measured_us = (
                uploads.iter().map(|u| to_us(u.actual_start)).min(),
                uploads.iter().map(|u| to_us(u.actual_end)).max(),
            );
            let runs = self.handed_out_of(agent, &wanted, measured_us).await?;
            found.extend(runs.into_iter().map(|run| (run.id.clone(), run)));
        }
        Ok(found)
    }

    /// The runs of `agent`'s hand-outs with the `wanted` ids, as handed out, for runs
    /// measured within `(earliest_us, latest_us)`: the hand-outs around those times
    /// first (one or two of the three or four an agent's horizon holds), then, for
    /// runs still not found, all of the agent's hand-outs not swept yet. (A run of a
    /// swept hand-out has its result or its row by then.)
    async fn handed_out_of(
        &self,
        agent: &str,
        wanted: &HashSet<&str>,
        (earliest_us, latest_us): (Option<i64>, Option<i64>),
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        const DOING: &str = "reading handed-out runs";
        // Which hand-outs, without their text: those this archive holds indexed are
        // not read again (see [`cache`]).
        let near = sqlx::query(
            "SELECT from_us, first_start_us, reach_us FROM light_handouts WHERE client = $1 \
             AND reach_us >= $2 AND first_start_us <= $3",
        )
        .bind(agent)
        .bind(earliest_us.unwrap_or(0).saturating_sub(LOOKUP_MARGIN_US))
        .bind(latest_us.unwrap_or(0).saturating_add(LOOKUP_MARGIN_US))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(DOING))?;
        let mut runs = Vec::new();
        for row in &near {
            let key = (
                agent.to_string(),
                row.get("from_us"),
                row.get("first_start_us"),
                row.get("reach_us"),
            );
            let handout = match self.handouts.get(&key) {
                Some(handout) => handout,
                None => {
                    let Some(text) = sqlx::query_scalar::<_, String>(
                        "SELECT runs FROM light_handouts WHERE client = $1 AND from_us = $2",
                    )
                    .bind(agent)
                    .bind(key.1)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(sql(DOING))?
                    else {
                        // Deleted since (retention); what it held is looked for below.
                        continue;
                    };
                    self.handouts.insert(key, text)?
                }
            };
            runs.extend(self.handouts.runs_named(&handout, agent, wanted)?);
        }
        if runs.len() == wanted.len() {
            return Ok(runs);
        }
        let unswept = sqlx::query(&format!(
            "SELECT client, runs FROM light_handouts WHERE client = $1 AND reach_us > {}",
            swept_until_sql()
        ))
        .bind(agent)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(DOING))?;
        let found: HashSet<String> = runs.iter().map(|run| run.id.clone()).collect();
        runs.extend(runs_of_rows(&unswept, |id, _, _| {
            wanted.contains(id) && !found.contains(id)
        })?);
        Ok(runs)
    }

    /// The handed-out run `run_id` once it has reported (it has no row), as it stands:
    /// found from its result's agent and times. (A run measured minutes from its plan,
    /// by an agent's clock that far off, is found this way only until its hand-out is
    /// swept; the runs API still lists it.)
    pub(super) async fn reported_handed_out_run(
        &self,
        run_id: &str,
    ) -> Result<Option<RunRecord>, ArchiveError> {
        let Some(result) = sqlx::query(
            "SELECT client, outcome, start_us, end_us, error FROM results WHERE run_id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql("reading a run"))?
        else {
            return Ok(None);
        };
        let client: String = result.get("client");
        let outcome = Outcome::from_row(&result);
        let measured_us = (Some(outcome.start_us), Some(outcome.end_us));
        let wanted = HashSet::from([run_id]);
        let run = self
            .handed_out_of(&client, &wanted, measured_us)
            .await?
            .pop();
        Ok(run.map(|run| outcome.applied_to(run)))
    }

    /// `agent`'s handed-out runs that have not ended by `now_us` and have no result.
    pub(super) async fn handed_out_not_ended(
        &self,
        agent: &str,
        now_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT client, runs FROM light_handouts WHERE client = $1 AND reach_us > $2",
        )
        .bind(agent)
        .bind(now_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading handed-out runs"))?;
        let runs = runs_of_rows(&rows, |_, _, end_us| end_us > now_us)?;
        Ok(self
            .settled(runs)
            .await?
            .into_iter()
            .filter(|run| run.state == RunState::Dispatched)
            .collect())
    }

    /// Handed-out runs planned to end after `ends_after_us` and start before
    /// `starts_before_us`, as they stand (see [`Archive::settled`]).
    pub(super) async fn handed_out_between(
        &self,
        ends_after_us: i64,
        starts_before_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        let rows = sqlx::query(
            "SELECT client, runs FROM light_handouts WHERE reach_us > $1 AND first_start_us < $2",
        )
        .bind(ends_after_us)
        .bind(starts_before_us)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("reading handed-out runs"))?;
        let runs = runs_of_rows(&rows, |_, start_us, end_us| {
            end_us > ends_after_us && start_us < starts_before_us
        })?;
        self.settled(runs).await
    }

    /// Handed-out `runs` as they stand: those with a row of their own left out (a
    /// sweep's missed record, or its late result, which is read as that row), and
    /// those with a result completed or failed by it, with its times.
    async fn settled(&self, runs: Vec<RunRecord>) -> Result<Vec<RunRecord>, ArchiveError> {
        let runs = self.without_rows(runs).await?;
        let ids: Vec<&str> = runs.iter().map(|run| run.id.as_str()).collect();
        let mut connection = self
            .pool
            .acquire()
            .await
            .map_err(sql("reading handed-out runs"))?;
        let mut reported = outcomes_of(&mut connection, self.backend, &ids).await?;
        Ok(runs
            .into_iter()
            .map(|run| match reported.remove(&run.id) {
                Some(outcome) => outcome.applied_to(run),
                None => run,
            })
            .collect())
    }

    /// The ids of the runs with a row in `runs` among each agent's runs planned to start
    /// within its span: one statement per agent, along `runs_client_state`, on one
    /// connection. Asked by id instead, a sweep of 64 hand-outs at a thousand agents
    /// (64 000 ids) was 2 000 statements on PostgreSQL and took 7-14 s.
    async fn stored_run_ids(&self, spans: &Spans<'_>) -> Result<HashSet<String>, ArchiveError> {
        const DOING: &str = "reading handed-out runs";
        let mut stored = HashSet::new();
        let statement = format!(
            "SELECT id FROM runs WHERE client = $1 AND state IN ({}) \
             AND planned_start_us >= $2 AND planned_start_us <= $3",
            every_state_sql()
        );
        let mut connection = self.pool.acquire().await.map_err(sql(DOING))?;
        for (client, &(first_start_us, last_start_us)) in spans {
            let rows = sqlx::query(&statement)
                .bind(*client)
                .bind(first_start_us)
                .bind(last_start_us)
                .fetch_all(&mut *connection)
                .await
                .map_err(sql(DOING))?;
            stored.extend(rows.iter().map(|row| row.get::<String, _>("id")));
        }
        Ok(stored)
    }

    /// `runs` less those that have a row in `runs` (a result, or a missed record).
    async fn without_rows(&self, runs: Vec<RunRecord>) -> Result<Vec<RunRecord>, ArchiveError> {
        if runs.is_empty() {
            return Ok(runs);
        }
        let mut spans = Spans::new();
        for run in &runs {
            widen(
                &mut spans,
                &run.client,
                run.planned_start_us,
                run.planned_start_us,
            );
        }
        let stored = self.stored_run_ids(&spans).await?;
        Ok(runs
            .into_iter()
            .filter(|run| !stored.contains(&run.id))
            .collect())
    }

    /// Sweeps the hand-outs whose every run ended before `overdue_before_us`, the
    /// [`SWEPT_AT_ONCE`] that ended first (and any that end with the last of them): the
    /// runs that have neither a result nor a row by then are stored as missed and
    /// returned, and [`SWEPT_UNTIL`] moves past the hand-outs, in one transaction.
    pub async fn sweep_handouts(
        &self,
        overdue_before_us: i64,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        const DOING: &str = "sweeping handed-out runs";
        // Read, and the runs with a result or a row found, before the write
        // transaction: read inside it, a sweep of a fleet's hand-outs held the one
        // writer through hundreds of reads on the other connections, and every upload
        // and hand-out waited. The few runs found without either are looked for again
        // inside it, where no result can be stored beside it (see
        // [`Archive::lock_against_sweeps`]); a hand-out is immutable.
        let last_reach_us: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT reach_us FROM light_handouts WHERE reach_us > {} AND reach_us < $1 \
             ORDER BY reach_us LIMIT 1 OFFSET {}",
            swept_until_sql(),
            SWEPT_AT_ONCE - 1
        ))
        .bind(overdue_before_us)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(DOING))?;
        let rows = sqlx::query(&format!(
            "SELECT client, first_start_us, reach_us, runs FROM light_handouts \
             WHERE reach_us > {} AND reach_us <= $1",
            swept_until_sql()
        ))
        .bind(last_reach_us.unwrap_or(overdue_before_us - 1))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(DOING))?;
        let Some(swept_until_us) = rows.iter().map(|row| row.get::<i64, _>("reach_us")).max()
        else {
            return Ok(Vec::new());
        };
        // A hand-out's runs start no later than its latest end (`reach_us`).
        let extents: Vec<(String, i64, i64)> = rows
            .iter()
            .map(|row| {
                (
                    row.get("client"),
                    row.get("first_start_us"),
                    row.get("reach_us"),
                )
            })
            .collect();
        let mut spans = Spans::new();
        for (client, first_start_us, reach_us) in &extents {
            widen(&mut spans, client, *first_start_us, *reach_us);
        }
        let with_rows = self.stored_run_ids(&spans).await?;
        let texts = texts_of_rows(&rows);
        let documents = texts
            .iter()
            .map(|(client, text)| Ok((client.as_str(), decode_json::<Document>(text)?)))
            .collect::<Result<Vec<_>, ArchiveError>>()?;
        // Judged by id on the compact form; a record is made only of the few runs found
        // with neither a row nor a result (made of all 64 000, it was a tenth of a
        // 1 000-agent server's CPU).
        let unrecorded: Vec<(&str, &Document, &HandedRun)> = documents
            .iter()
            .flat_map(|(client, document)| {
                document
                    .runs
                    .iter()
                    .map(move |run| (*client, document, run))
            })
            .filter(|(_, _, run)| !with_rows.contains(run.1.as_ref()))
            .collect();
        let reported = {
            let ids: Vec<&str> = unrecorded
                .iter()
                .map(|(_, _, run)| run.1.as_ref())
                .collect();
            let mut connection = self.pool.acquire().await.map_err(sql(DOING))?;
            reported_ids(&mut connection, self.backend, &ids).await?
        };
        let unreported = unrecorded
            .into_iter()
            .filter(|(_, _, run)| !reported.contains(run.1.as_ref()))
            .map(|(client, document, run)| document.run(client, run))
            .collect::<Result<Vec<RunRecord>, ArchiveError>>()?;
        let mut tx = self.write_transaction().await.map_err(sql(DOING))?;
        self.lock_against_sweeps(&mut tx, SweepLock::Exclusive)
            .await?;
        let reported_since = {
            let ids: Vec<&str> = unreported.iter().map(|run| run.id.as_str()).collect();
            reported_ids(&mut tx, self.backend, &ids).await?
        };
        let missed: Vec<RunRecord> = unreported
            .into_iter()
            .filter(|run| !reported_since.contains(&run.id))
            .map(|run| RunRecord {
                state: RunState::Missed,
                reason: Some(format!(
                    "agent '{}' fetched the run but reported no result in time",
                    run.client
                )),
                ..run
            })
            .collect();
        let inserted = insert_run_rows(&mut tx, self.backend, &missed, now_us()).await?;
        // Never lowered: a sweep by an earlier leader may still be finishing.
        sqlx::query(
            "INSERT INTO planner_state (name, value) VALUES ($1, $2) ON CONFLICT (name) \
             DO UPDATE SET value = excluded.value WHERE planner_state.value < excluded.value",
        )
        .bind(SWEPT_UNTIL)
        .bind(swept_until_us)
        .execute(&mut *tx)
        .await
        .map_err(sql(DOING))?;
        tx.commit().await.map_err(sql(DOING))?;
        Ok(missed
            .into_iter()
            .filter(|run| inserted.contains(&run.id))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_runs(client: &str, text: &str) -> Result<Vec<RunRecord>, ArchiveError> {
        let document: Document = decode_json(text)?;
        document
            .runs
            .iter()
            .map(|run| document.run(client, run))
            .collect()
    }

    fn light_run(id: &str, server: &str, start_us: i64) -> RunRecord {
        RunRecord {
            id: id.to_string(),
            task: "latency-mesh".into(),
            test: "latency".into(),
            test_name: "rtt".into(),
            client: "a".into(),
            server: server.to_string(),
            target: None,
            spec: serde_json::json!({"count": 10, "interval": "100ms"}).into(),
            exclusive: false,
            reverse: false,
            priority: 0,
            claims: vec![
                Claim {
                    resource: "agent:a".into(),
                    mode: ClaimMode::Shared,
                },
                Claim {
                    resource: format!("agent:{server}"),
                    mode: ClaimMode::Shared,
                },
            ],
            planned_start_us: start_us,
            planned_end_us: start_us + 1_000_000,
            actual_start_us: None,
            actual_end_us: None,
            state: RunState::Dispatched,
            reason: None,
        }
    }

    #[test]
    fn a_hand_out_decodes_to_the_runs_it_was_made_of() {
        let mut runs = vec![
            light_run("latency-mesh/1/a>b", "b", 10),
            light_run("latency-mesh/1/a>c", "c", 20),
        ];
        runs[1].task = "other".into();
        runs[1].target = Some("198.51.100.7:862".into());
        runs[1].claims[1].mode = ClaimMode::Exclusive;
        runs[1].exclusive = true;
        let text = encode(&runs);
        assert_eq!(decode_runs("a", &text).unwrap(), runs);
        // Shared parts are written once: one spec per task, one name per resource.
        assert_eq!(text.matches("100ms").count(), 2);
        assert_eq!(text.matches("agent:a").count(), 1);
        // Read without copying a run's names out of the text.
        let document: Document = decode_json(&text).unwrap();
        assert!(document
            .runs
            .iter()
            .all(|run| matches!((&run.1, &run.2), (Cow::Borrowed(_), Cow::Borrowed(_)))));
    }

    #[test]
    fn a_kept_hand_out_finds_the_runs_named_as_decoding_it_whole_does() {
        let runs: Vec<RunRecord> = (0..300)
            .map(|k| light_run(&format!("latency-mesh/{k}/a>b{}", k % 7), "b", k * 10))
            .collect();
        let text = encode(&runs);
        let cache = HandOutCache::new(1 << 20);
        let key = ("a".to_string(), 0, 0, 2_990);
        let kept = cache.insert(key.clone(), text.clone()).unwrap();
        let wanted = HashSet::from([
            "latency-mesh/0/a>b0",
            "latency-mesh/151/a>b4",
            "latency-mesh/299/a>b5",
            "latency-mesh/300/a>b6",
        ]);
        let mut found = cache.runs_named(&kept, "a", &wanted).unwrap();
        found.sort_by(|x, y| x.id.cmp(&y.id));
        let mut expected: Vec<RunRecord> = decode_runs("a", &text)
            .unwrap()
            .into_iter()
            .filter(|run| wanted.contains(run.id.as_str()))
            .collect();
        expected.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(expected.len(), 3);
        assert_eq!(found, expected);
        assert!(cache.get(&key).is_some());
        // Another hand-out of the same window and another span is another entry.
        assert!(cache.get(&("a".to_string(), 0, 0, 3_000)).is_none());
    }

    #[test]
    fn hand_outs_kept_beyond_the_capacity_drop_the_least_recently_used() {
        let text = encode(&[light_run("latency-mesh/1/a>b", "b", 10)]);
        let cache = HandOutCache::new(text.len() * 2);
        let key = |from_us: i64| ("a".to_string(), from_us, 10, 1_000_010);
        cache.insert(key(1), text.clone()).unwrap();
        cache.insert(key(2), text.clone()).unwrap();
        assert!(cache.get(&key(1)).is_some());
        cache.insert(key(3), text.clone()).unwrap();
        assert!(cache.get(&key(1)).is_some(), "used last but one");
        assert!(cache.get(&key(2)).is_none(), "least recently used");
        assert!(cache.get(&key(3)).is_some());
        assert!(cache.insert(key(4), "{".into()).is_err());
    }

    #[test]
    fn the_span_read_names_every_state() {
        assert_eq!(
            every_state_sql(),
            "'scheduled', 'dispatched', 'completed', 'failed', 'non_start', 'missed'"
        );
    }

    #[test]
    fn a_hand_out_naming_what_it_does_not_hold_is_an_error() {
        let text = encode(&[light_run("latency-mesh/1/a>b", "b", 10)]);
        let broken = text.replace("[[0,\"shared\"]", "[[7,\"shared\"]");
        assert_ne!(broken, text);
        let error = decode_runs("a", &broken).unwrap_err().to_string();
        assert!(error.contains("resource"), "{error}");
        assert!(decode_runs("a", "{").is_err());
    }
}
