//! Which APIs and versions `serve` implements, as ApiVersions advertises them (KIP-35, KIP-511), and the
//! finalized `transaction.version` feature (KIP-584, KIP-1022).

use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

/// Kafka's wire error codes (`Errors.java`) the driver answers itself; the engine's are `KafkaError::code`.
pub mod code {
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const INVALID_REQUEST: i16 = 42;
    pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
    pub const INVALID_RECORD: i16 = 87;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
}

/// The finalized `transaction.version`: 2, as a new Kafka 4.3.1 cluster finalizes it (KIP-890's
/// transactions v2 and KIP-1022; `kafka-features describe` on a freshly formatted 4.3.1 cluster). A
/// client speaks TV2 only if it knows it (Kafka's Java client 4.0 and newer); others keep TV1's requests.
pub const TRANSACTION_VERSION: i16 = 2;

/// The implemented APIs and the versions served: each range lies inside what kafka-protocol 0.18 (Kafka
/// 4.1's schemas) decodes, which lies inside Kafka 4.3's. Narrower where a version means more than is
/// implemented: AddPartitionsToTxn v4+ is the broker-to-broker verification batch (KIP-890), and
/// InitProducerId v6 is KIP-939's two-phase commit, OffsetCommit v10 and OffsetFetch v8+ name topics by id
/// and batch groups (KIP-848's era), which the group protocol here does not need.
pub const SUPPORTED: [(ApiKey, i16, i16); 18] = [
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 7),
];

/// `ApiVersionsRequest.isValid` for v3+: the client's software name and version each match
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` (KIP-511).
pub fn names_valid(request: &ApiVersionsRequest) -> bool {
    let valid = |s: &str| {
        let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        edge(s.chars().next())
            && edge(s.chars().last())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    valid(&request.client_software_name) && valid(&request.client_software_version)
}

/// `ApiVersionsRequest.getErrorResponse` for INVALID_REQUEST: the error alone, no API or feature listed.
pub fn invalid_api_versions_request() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = code::INVALID_REQUEST;
    r
}

/// The served range of an API, if it is served.
pub fn served(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED.iter().find(|(k, _, _)| *k == key).map(|&(_, min, max)| (min, max))
}

pub fn is_served(key: ApiKey, version: i16) -> bool {
    served(key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// The ApiVersions answer; `error_code` is UNSUPPORTED_VERSION when the client asked in a version we do
/// not speak (then it is sent as v0, which every client can read, as `ApiVersionsRequest` does).
pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED
        .iter()
        .map(|&(key, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = key as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    let name = StrBytes::from_static_str("transaction.version");
    let mut supported = SupportedFeatureKey::default();
    supported.name = name.clone();
    supported.min_version = 0;
    supported.max_version = TRANSACTION_VERSION;
    r.supported_features = vec![supported];
    let mut finalized = FinalizedFeatureKey::default();
    finalized.name = name;
    finalized.min_version_level = TRANSACTION_VERSION;
    finalized.max_version_level = TRANSACTION_VERSION;
    r.finalized_features = vec![finalized];
    r.finalized_features_epoch = 1;
    r
}
