import Foundation

/// A strict reader of the Prometheus text exposition format (version 0.0.4), so a test can
/// check that `/metrics` is valid for a scraper, not only that it contains some text: every
/// line is a `# HELP`, a `# TYPE`, another comment or a sample
/// `name{label="value",…} value [timestamp]`, and every sample belongs to a family whose
/// `# TYPE` came before it.
struct PrometheusText {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One sample.
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// The type of each family, by family name.
    private(set) var types: [String: String] = [:]
    /// Every sample, in order.
    private(set) var samples: [Sample] = []

    /// Reads `text`; throws at the first line that is not valid exposition format.
    init(_ text: String) throws {
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            let line = String(line)
            func fail(_ why: String) -> Failure { Failure(description: "line \(index + 1) (\(line)): \(why)") }
            if line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst("# TYPE ".count).split(separator: " ")
                guard parts.count == 2, Self.isMetricName(parts[0]),
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[1])
                else { throw fail("malformed TYPE") }
                guard types[String(parts[0])] == nil else { throw fail("a second TYPE for \(parts[0])") }
                types[String(parts[0])] = String(parts[1])
                continue
            }
            if line.hasPrefix("# HELP ") {
                guard let name = line.dropFirst("# HELP ".count).split(separator: " ").first, Self.isMetricName(name) else {
                    throw fail("malformed HELP")
                }
                continue
            }
            if line.hasPrefix("#") { continue }
            let sample = try Self.sample(line, fail: fail)
            guard types[Self.family(of: sample.name, in: types)] != nil else {
                throw fail("a sample of \(sample.name) before its TYPE")
            }
            samples.append(sample)
        }
    }

    /// The value of the sample `name` with exactly `labels`, if there is one.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The family a sample name belongs to (`x_bucket`, `x_sum`, `x_count` of a histogram
    /// or summary `x` belong to `x`).
    private static func family(of name: String, in types: [String: String]) -> String {
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" || types[base] == "summary" { return base }
        }
        return name
    }

    private static func isMetricName(_ name: Substring) -> Bool {
        guard let first = name.first, first.isASCII, first.isLetter || first == "_" || first == ":" else { return false }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
    }

    private static func isLabelName(_ name: String) -> Bool {
        guard let first = name.first, first.isASCII, first.isLetter || first == "_" else { return false }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
    }

    private static func sample(_ line: String, fail: (String) -> Failure) throws -> Sample {
        var rest = Substring(line)
        let name = rest.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
        guard isMetricName(name) else { throw fail("no metric name") }
        rest = rest.dropFirst(name.count)
        var labels: [String: String] = [:]
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                let labelName = String(rest.prefix { $0 != "=" })
                guard isLabelName(labelName) else { throw fail("a bad label name") }
                rest = rest.dropFirst(labelName.count)
                guard rest.hasPrefix("=\"") else { throw fail("a label without a quoted value") }
                rest = rest.dropFirst(2)
                var value = ""
                while true {
                    guard let character = rest.first else { throw fail("an unterminated label value") }
                    rest = rest.dropFirst()
                    if character == "\"" { break }
                    if character == "\\" {
                        switch rest.first {
                        case "\\": value.append("\\")
                        case "\"": value.append("\"")
                        case "n": value.append("\n")
                        default: throw fail("a bad escape in a label value")
                        }
                        rest = rest.dropFirst()
                    } else {
                        value.append(character)
                    }
                }
                guard labels.updateValue(value, forKey: labelName) == nil else { throw fail("a repeated label") }
                if rest.first == "," { rest = rest.dropFirst() } else if rest.first != "}" { throw fail("a bad label list") }
            }
            rest = rest.dropFirst()
        }
        guard rest.first == " " else { throw fail("no space before the value") }
        let fields = rest.split(separator: " ")
        guard (1...2).contains(fields.count) else { throw fail("not `value [timestamp]`") }
        let text = String(fields[0])
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard let number = Double(text) else { throw fail("the value \(text) is not a number") }
            value = number
        }
        if fields.count == 2, Int64(fields[1]) == nil { throw fail("the timestamp is not an integer") }
        return Sample(name: String(name), labels: labels, value: value)
    }
}
