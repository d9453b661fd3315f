import Foundation
import NIOCore

/// Any JSON value: the one form every request body is read in.
///
/// A body is parsed once by `JSONSerialization` (one pass over the bytes, no per-value
/// decoder, so a batch of a thousand notifications stays cheap) and converted to this enum,
/// then read with a ``JSONCursor``, which names the full path of whatever is wrong. It is
/// `Encodable`, so ``JSONWriter`` writes it back (a payload's text, a request hash).
enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number the parser read as an integer that fits 64 bits.
    case integer(Int64)
    /// Any other number.
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses JSON text of any kind (objects, arrays and bare values alike); nil when it is not
    /// JSON.
    static func parse(_ data: Data) -> JSONValue? {
        guard let object = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else {
            return nil
        }
        return JSONValue(foundation: object)
    }

    /// Parses a request body (any JSON value; nil when it is not JSON).
    static func parse(_ body: ByteBuffer) -> JSONValue? { parse(Data(body.readableBytesView)) }

    /// Parses JSON text stored as a string (telemetry kept by the database).
    static func parse(_ text: String) -> JSONValue? { parse(Data(text.utf8)) }

    /// Converts what `JSONSerialization` returns.
    ///
    /// The order of the cases matters for speed: asking whether a Swift dictionary or array is
    /// an `NSNumber` makes the runtime bridge it, whole, to `NSDictionary` or `NSArray` first
    /// (on Linux that took a third of the batch route's time), so containers are matched before
    /// numbers.
    init(foundation object: Any) {
        switch object {
        case let string as String:
            self = .string(string)
        case let fields as [String: Any]:
            var converted: [String: JSONValue] = [:]
            converted.reserveCapacity(fields.count)
            for (key, value) in fields { converted[key] = JSONValue(foundation: value) }
            self = .object(converted)
        case let values as [Any]:
            self = .array(values.map(JSONValue.init(foundation:)))
        case let number as NSNumber:
            self = JSONValue(number)
        default:
            self = .null
        }
    }

    /// A number as `JSONSerialization` reads it: `true` and `false` are `NSNumber`s of type
    /// `c`; numbers with a fraction or an exponent are doubles.
    private init(_ number: NSNumber) {
        switch UInt8(bitPattern: number.objCType.pointee) {
        case UInt8(ascii: "c"):
            self = .bool(number.boolValue)
        case UInt8(ascii: "d"), UInt8(ascii: "f"):
            self = .double(number.doubleValue)
        case UInt8(ascii: "Q"), UInt8(ascii: "L"), UInt8(ascii: "I"):
            let value = number.uint64Value
            self = value <= UInt64(Int64.max) ? .integer(Int64(value)) : .double(number.doubleValue)
        default:
            self = .integer(number.int64Value)
        }
    }
}

extension JSONValue: Encodable {
    /// Writes the value back as JSON.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let values): try container.encode(values)
        case .object(let fields): try container.encode(fields)
        }
    }
}
