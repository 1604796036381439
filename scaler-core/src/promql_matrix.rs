//! The streaming parse of a `/api/v1/query_range` answer (the backtest's range queries): each
//! sample is checked and stored as the parser meets it, so the answer is never held as a tree.
//! Memory is the body plus what is kept: at most the chunk's evaluation times × the query's part
//! names. (A series whose `values` come before its `metric`, which neither Prometheus nor
//! VictoriaMetrics writes, is buffered until its labels arrive.)
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::RangeInclusive;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{QueryError, Target, checked_value, part};
use names::echo;

/// Per evaluation time (Unix seconds), `part` → value.
pub type Steps = BTreeMap<i64, HashMap<String, f64>>;

/// Where the samples go, and the first problem met (the parse stops there).
struct Sink<'t> {
    target: &'t Target,
    times: RangeInclusive<i64>,
    steps: Steps,
    problem: Option<QueryError>,
}

impl Sink<'_> {
    /// Records a problem and returns the error that stops the parser.
    fn fail<E: de::Error>(&mut self, message: String) -> E {
        self.problem = Some(QueryError::Garbage(message));
        E::custom("stopped")
    }

    /// The series' part, after checking its labels are the asked cluster's.
    fn part<E: de::Error>(
        &mut self,
        labels: &HashMap<Cow<str>, Cow<str>>,
    ) -> Result<&'static str, E> {
        let label = |name: &str| labels.get(name).map(|v| v.as_ref());
        let Some(name) = label("part") else {
            return Err(self.fail("a series without a part label".into()));
        };
        // Only the query's own parts: with the time check, what is kept stays bounded.
        let Some(known) = part::ALL.iter().find(|p| **p == name) else {
            return Err(self.fail(format!("{}: not a part of the decision query", echo(name))));
        };
        let (namespace, cluster) = (label("namespace"), label("cluster"));
        if namespace != Some(self.target.namespace.as_str())
            || cluster != Some(self.target.cluster.as_str())
        {
            let message = format!(
                "{}: a series labelled namespace {} cluster {}, but the query asked for {}/{} only: \
                 refusing another cluster's history",
                echo(name),
                echo(namespace.unwrap_or("(none)")),
                echo(cluster.unwrap_or("(none)")),
                self.target.namespace,
                self.target.cluster
            );
            return Err(self.fail(message));
        }
        Ok(known)
    }

    fn sample<E: de::Error>(&mut self, name: &'static str, time: f64, text: &str) -> Result<(), E> {
        if !time.is_finite() || time.fract() != 0.0 {
            let m = format!(
                "{name}: timestamp {time} is not a whole second: use a whole-second --step"
            );
            return Err(self.fail(m));
        }
        if time.abs() > 1e15 || !self.times.contains(&(time as i64)) {
            let m = format!(
                "{name}: timestamp {time} is outside the range asked for ({} to {})",
                self.times.start(),
                self.times.end()
            );
            return Err(self.fail(m));
        }
        let value = match checked_value(name, text) {
            Ok(v) => v,
            Err(e) => {
                self.problem = Some(e);
                return Err(E::custom("stopped"));
            }
        };
        if self
            .steps
            .entry(time as i64)
            .or_default()
            .insert(name.to_owned(), value)
            .is_some()
        {
            return Err(self.fail(format!("{name}: more than one sample at {time}")));
        }
        Ok(())
    }
}

/// Parses a range answer of a one-cluster decision query for `target` (see
/// [`super::parse_matrix`]).
pub fn parse(
    body: &[u8],
    target: &Target,
    times: RangeInclusive<i64>,
) -> Result<Steps, QueryError> {
    let mut sink = Sink {
        target,
        times,
        steps: Steps::new(),
        problem: None,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let outcome = Top(&mut sink)
        .deserialize(&mut deserializer)
        .and_then(|top| deserializer.end().map(|()| top));
    if let Some(problem) = sink.problem {
        return Err(problem);
    }
    let (status, error, result_type) = outcome.map_err(|e| {
        QueryError::Garbage(format!(
            "not a Prometheus API answer: {}",
            echo(&e.to_string())
        ))
    })?;
    if status != "success" {
        return Err(QueryError::Garbage(format!(
            "status {}: {}",
            echo(&status),
            echo(&error.unwrap_or_default())
        )));
    }
    match result_type.as_deref() {
        Some("matrix") => Ok(sink.steps),
        Some(other) => Err(QueryError::Garbage(format!(
            "result type {}, want matrix",
            echo(other)
        ))),
        None => Err(QueryError::Garbage("no data".into())),
    }
}

/// `{"status", "data", "error"}` → (status, error, data's resultType).
struct Top<'s, 't>(&'s mut Sink<'t>);

impl<'de> DeserializeSeed<'de> for Top<'_, '_> {
    type Value = (String, Option<String>, Option<String>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_, '_> {
    type Value = (String, Option<String>, Option<String>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Prometheus API answer")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut status, mut error, mut result_type) = (None, None, None);
        while let Some(key) = map.next_key::<Cow<str>>()? {
            match key.as_ref() {
                "status" => status = Some(map.next_value::<String>()?),
                "error" => error = map.next_value::<Option<String>>()?,
                "data" => result_type = map.next_value_seed(Data(&mut *self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let status = status.ok_or_else(|| de::Error::missing_field("status"))?;
        Ok((status, error, result_type))
    }
}

/// `{"resultType", "result"}` → the resultType; the result's series go to the sink.
struct Data<'s, 't>(&'s mut Sink<'t>);

impl<'de> DeserializeSeed<'de> for Data<'_, '_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Data<'_, '_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the answer's data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut result_type = None;
        while let Some(key) = map.next_key::<Cow<str>>()? {
            match key.as_ref() {
                "resultType" => result_type = Some(map.next_value::<String>()?),
                "result" => map.next_value_seed(Series(&mut *self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(result_type)
    }
}

/// `[series, …]`, each `{"metric": {…}, "values": [[time, "value"], …]}`.
struct Series<'s, 't>(&'s mut Sink<'t>);

impl<'de> DeserializeSeed<'de> for Series<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Series<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of series")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(OneSeries(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

struct OneSeries<'s, 't>(&'s mut Sink<'t>);

impl<'de> DeserializeSeed<'de> for OneSeries<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for OneSeries<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a series")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut name = None;
        let mut early: Option<Vec<(f64, Cow<'de, str>)>> = None;
        while let Some(key) = map.next_key::<Cow<str>>()? {
            match key.as_ref() {
                "metric" => {
                    let labels: HashMap<Cow<'de, str>, Cow<'de, str>> = map.next_value()?;
                    name = Some(self.0.part(&labels)?);
                }
                "values" => match name {
                    Some(name) => map.next_value_seed(Values(&mut *self.0, name))?,
                    None => early = Some(map.next_value()?),
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let Some(name) = name else {
            return Err(self.0.fail("a series without a part label".into()));
        };
        for (time, text) in early.unwrap_or_default() {
            self.0.sample(name, time, &text)?;
        }
        Ok(())
    }
}

/// `[[time, "value"], …]` of the part `.1`, each sample stored as it is read.
struct Values<'s, 't>(&'s mut Sink<'t>, &'static str);

impl<'de> DeserializeSeed<'de> for Values<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Values<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of [time, \"value\"] samples")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some((time, text)) = seq.next_element::<(f64, Cow<'de, str>)>()? {
            self.0.sample(self.1, time, &text)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg() -> Target {
        Target {
            namespace: "ns".into(),
            cluster: "pg".into(),
        }
    }

    #[test]
    fn values_before_labels_status_after_data_and_errors_as_queries_see_them() {
        let body = br#"{"data":{"result":[{"values":[[60,"3"]],"metric":{"part":"instances","cluster":"pg","namespace":"ns"}}],"resultType":"matrix"},"status":"success"}"#;
        assert_eq!(parse(body, &pg(), 0..=60).unwrap()[&60]["instances"], 3.0);
        let failed = br#"{"status":"error","errorType":"bad_data","error":"boom"}"#;
        let error = parse(failed, &pg(), 0..=60).unwrap_err().to_string();
        assert!(error.contains("boom"), "{error}");
        let count = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"part":"instances","cluster":"pg","namespace":"ns"},"values":[[60,"2.5"]]}]}}"#;
        let error = parse(count, &pg(), 0..=60).unwrap_err().to_string();
        assert!(error.contains("not a pod count"), "{error}");
        let truncated = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"part":"instances""#;
        let error = parse(truncated, &pg(), 0..=60).unwrap_err().to_string();
        assert!(error.contains("not a Prometheus API answer"), "{error}");
    }
}
