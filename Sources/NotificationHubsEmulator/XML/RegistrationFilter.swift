/// A `$filter` on `GET /registrations` (reference §2.5): `Property eq 'value'` clauses joined by
/// `and`. Property names are case-insensitive; `ChannelUri` matches the PNS handle of every
/// platform; `DeviceToken` compares case-insensitively.
struct RegistrationFilter: Sendable {
    struct Clause: Sendable {
        var property: String
        var value: String
    }

    let clauses: [Clause]

    static let properties: Set<String> = [
        "channeluri", "devicetoken", "gcmregistrationid", "fcmregistrationid", "fcmv1registrationid", "admregistrationid",
        "baiduchannelid", "baiduuserid", "endpoint", "p256dh", "auth", "xiaomiregistrationid",
    ]

    init(_ text: String) throws(HubError) {
        let unsupported = HubError.badRequest("Notification hubs do not support this query: \(text)")
        var clauses: [Clause] = []
        var rest = Substring(text.trimmingWhitespace())
        while !rest.isEmpty {
            // Property name.
            guard let space = rest.firstIndex(where: \.isWhitespace) else { throw unsupported }
            let property = rest[..<space].lowercased()
            rest = rest[space...].drop(while: \.isWhitespace)
            guard rest.lowercased().hasPrefix("eq") else { throw unsupported }
            rest = rest.dropFirst(2).drop(while: \.isWhitespace)
            // Quoted value; '' escapes a quote.
            guard rest.first == "'" else { throw unsupported }
            rest = rest.dropFirst()
            var value = ""
            var closed = false
            while let c = rest.first {
                rest = rest.dropFirst()
                if c == "'" {
                    if rest.first == "'" {
                        value.append("'")
                        rest = rest.dropFirst()
                    } else {
                        closed = true
                        break
                    }
                } else {
                    value.append(c)
                }
            }
            guard closed, Self.properties.contains(property) else { throw unsupported }
            guard !value.isEmpty else { throw HubError.badRequest("The $filter value for \(property) is empty.") }
            clauses.append(Clause(property: property, value: value))
            rest = rest.drop(while: \.isWhitespace)
            if rest.isEmpty { break }
            guard rest.lowercased().hasPrefix("and"), rest.dropFirst(3).first?.isWhitespace == true else { throw unsupported }
            rest = rest.dropFirst(3).drop(while: \.isWhitespace)
        }
        guard !clauses.isEmpty else { throw unsupported }
        self.clauses = clauses
    }

    func matches(_ registration: Registration) -> Bool {
        clauses.allSatisfy { clause in
            switch clause.property {
            case "channeluri":
                // The generic handle filter; JS percent-encodes the URI inside the literal.
                let handle = registration.handle
                return handle == clause.value || handle == PercentEncoding.decode(clause.value)
                    || (registration.platform == .apple && handle.caseInsensitiveEquals(clause.value))
            case "devicetoken":
                return registration.platform == .apple && registration.handle.caseInsensitiveEquals(clause.value)
            case "fcmregistrationid":
                return registration.platform == .gcm && registration.handle == clause.value
            default:
                let element = registration.platform.handleElements.first { $0.lowercased() == clause.property }
                guard let element else { return false }
                return registration.handles[element] == clause.value
            }
        }
    }
}
