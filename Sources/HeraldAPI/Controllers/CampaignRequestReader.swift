import Foundation
import HeraldDomain
import HeraldStorage

/// Reads campaign request bodies (`POST /v1/campaigns`, `PATCH /v1/campaigns/{id}`) into
/// ``CampaignDefinition``s, as ``NotificationRequestReader`` reads notifications: parsed once,
/// read with a ``JSONCursor`` under ``JSONReadingRules/senderAPI``, so a wrong field is a 400
/// naming its path (`audience.users[2] must be a string`, `schedule.cron: a cron expression has
/// 5 fields; got 6`) and unknown fields are refused.
///
/// The body is the JSON form of a campaign: `name`, `audience` (`{"tags": "…"}`,
/// `{"users": […]}` or `{"all": true}`), `content` (as `/v1/notifications`: native payloads as
/// objects, WNS XML as a string, template parameters), `schedule` (`{"at": "<ISO 8601>"}` or
/// `{"cron": "*/5 * * * *", "timeZone": "Europe/Berlin"}`), and the optional `apnsPushType`,
/// `priority`, `collapseId`, `ttl`, `catchUpSeconds`, `throttlePerSecond`, and `localTime`
/// (`"09:00"`: each run sends in waves at that time of day in each zone).
///
/// The domain's rules (``CampaignDefinition/validated(now:)``: the audience, payload limits,
/// ranges, a schedule that fires) and the run-size limit (`HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN`,
/// `422 run_too_large`) are checked by the store on the database clock; this reader checks the
/// shape, the cron expression and zone.
enum CampaignRequestReader {
    /// The fields a new campaign must have (the OpenAPI `CampaignRequest.required`).
    static let requiredFields = ["name", "audience", "content", "schedule"]
    /// The optional fields, which `PATCH` may also clear with `null`.
    static let optionalFields = [
        "apnsPushType", "priority", "collapseId", "ttl", "catchUpSeconds", "throttlePerSecond", "localTime",
    ]
    /// Every field of a campaign.
    static let knownFields = Set(requiredFields + optionalFields)
    /// The fields of a schedule.
    static let scheduleFields: Set<String> = ["at", "cron", "timeZone"]

    /// `POST /v1/campaigns`: a whole definition.
    static func definition(_ body: JSONObjectCursor) throws(APIError) -> CampaignDefinition {
        for field in requiredFields { _ = try body.required(field) }
        try body.refuseUnknownKeys(knownFields, "is not a field of a campaign")
        var definition = CampaignDefinition(
            name: try body.field("name").string(), audience: try audience(body.field("audience").object()),
            content: try NotificationRequestReader.content(body.field("content").object()),
            schedule: try schedule(body.field("schedule").object()))
        for field in optionalFields where body.fields[field] != nil {
            try apply(body.field(field), named: field, to: &definition)
        }
        return definition
    }

    /// `PATCH /v1/campaigns/{id}`: `stored` with the fields the body gives replaced (a given
    /// `audience`, `content` or `schedule` replaces the stored one whole); `null` clears an
    /// optional field and is refused for a required one.
    static func patched(_ stored: CampaignDefinition, with body: JSONObjectCursor) throws(APIError) -> CampaignDefinition {
        try body.refuseUnknownKeys(knownFields, "is not a field of a campaign")
        var definition = stored
        for field in body.fields.keys.sorted() {
            try apply(body.field(field), named: field, to: &definition)
        }
        return definition
    }

    /// Sets one field of `definition` from `value`.
    static func apply(_ value: JSONCursor, named field: String, to definition: inout CampaignDefinition) throws(APIError) {
        if value.isNull, requiredFields.contains(field) {
            throw value.refusal("cannot be null: a campaign always has one")
        }
        switch field {
        case "name": definition.name = try value.string()
        case "audience": definition.audience = try audience(value.object())
        case "content": definition.content = try NotificationRequestReader.content(value.object())
        case "schedule": definition.schedule = try schedule(value.object())
        case "apnsPushType": definition.apnsPushType = value.isNull ? nil : try value.string()
        case "priority":
            if value.isNull {
                definition.priority = nil
            } else {
                guard let priority = NotificationPriority(rawValue: try value.string()) else {
                    throw value.refusal("is high or normal")
                }
                definition.priority = priority
            }
        case "collapseId": definition.collapseId = value.isNull ? nil : try value.string()
        case "ttl": definition.ttl = value.isNull ? nil : try value.wholeNumber()
        case "catchUpSeconds": definition.catchUpSeconds = value.isNull ? nil : try value.wholeNumber()
        case "throttlePerSecond": definition.throttlePerSecond = value.isNull ? nil : try value.wholeNumber()
        case "localTime":
            if value.isNull {
                definition.localTime = nil
            } else {
                do { definition.localTime = try LocalTime(parsing: try value.string()) } catch let error as DomainError {
                    throw APIError(.badRequest, code: error.code, message: "\(value.path): \(error.message)")
                } catch {
                    throw value.refusal("is a time of day HH:MM")
                }
            }
        default: throw value.refusal("is not a field of a campaign")
        }
    }

    /// `{"tags": "…"}`, `{"users": […]}` or `{"all": true}`: exactly one.
    static func audience(_ object: JSONObjectCursor) throws(APIError) -> CampaignAudience {
        guard object.keys.count == 1, let kind = object.keys.first else {
            throw object.refusal("needs exactly one of tags, users, all")
        }
        let field = object.field(kind)
        switch kind {
        case "tags": return .tags(try field.string())
        case "users": return .users(try field.strings())
        case "all":
            guard case .bool(true) = field.value else { throw field.refusal("must be true") }
            return .all
        default: throw field.refusal("is not a kind of audience (tags, users, all)")
        }
    }

    /// `{"at": "<ISO 8601>"}` or `{"cron": "…", "timeZone": "…"}` (zone optional: UTC). A bad
    /// expression is a 400 naming `schedule.cron`, an unknown zone one naming
    /// `schedule.timeZone`, both with code `invalid_schedule`.
    static func schedule(_ object: JSONObjectCursor) throws(APIError) -> CampaignSchedule {
        try object.refuseUnknownKeys(scheduleFields, "is not a field of a schedule (at, or cron and timeZone)")
        if let at = object["at"] {
            guard object["cron"] == nil, object["timeZone"] == nil else {
                throw object.refusal("has either at (a one-off) or cron with an optional timeZone, not both")
            }
            guard let instant = JSONDate.parse(try at.string()) else {
                throw at.refusal("is an ISO 8601 date-time with a zone, such as 2026-11-23T10:00:00Z")
            }
            return .once(instant)
        }
        guard let cron = object["cron"] else {
            throw object.refusal("needs at (a one-off instant) or cron (a recurring 5-field expression)")
        }
        let expression = try cron.string()
        let zoneField = object.field("timeZone")
        let zone = zoneField.isNull ? "UTC" : try zoneField.string()
        // The expression alone first, so each problem names its own field.
        do {
            _ = try CronSchedule(expression: expression, timeZone: "UTC")
        } catch {
            throw APIError(.badRequest, code: .invalidSchedule, message: "\(cron.path): \(error.reason)")
        }
        do {
            return .recurring(try CronSchedule(expression: expression, timeZone: zone))
        } catch {
            throw APIError(.badRequest, code: .invalidSchedule, message: "\(zoneField.path): \(error.reason)")
        }
    }

    /// `POST /v1/campaigns/{id}/runs` takes no body: an empty one, or `{}`.
    static func checkEmpty(_ body: JSONObjectCursor) throws(APIError) {
        try body.refuseUnknownKeys([], "is not a field of a fire request (it takes no body)")
    }
}
