//! The hand-maintained OpenAPI 3 document served at `/openapi.json`.
//! A test checks that it documents exactly the routes of [`crate::api::ROUTES`].

pub const DOCUMENT: &str = include_str!("../openapi.json");

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::DOCUMENT;
    use crate::api::ROUTES;

    #[test]
    fn documents_exactly_the_served_routes() {
        let document: serde_json::Value =
            serde_json::from_str(DOCUMENT).expect("openapi.json is JSON");
        assert_eq!(document["openapi"], "3.0.3");
        let mut documented = BTreeSet::new();
        for (path, methods) in document["paths"].as_object().expect("paths") {
            for method in methods.as_object().expect("methods").keys() {
                documented.insert((method.clone(), path.clone()));
            }
        }
        let served: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| (method.to_string(), path.to_string()))
            .collect();
        assert_eq!(documented, served);
    }
}
