import Foundation
import _ContextStackCore

/// The kind of an attribute, as the model and the schema see it.
public enum AttributeKind: String, Sendable, Hashable, CaseIterable {
    case bool, int, int16, int32, int64, double, float, string, date, data, uuid, url, decimal

    /// The SQLite column type.
    package var columnType: String {
        switch self {
        case .bool, .int, .int16, .int32, .int64: "INTEGER"
        case .double, .float, .date: "REAL"
        case .string, .url, .decimal: "TEXT"
        case .data, .uuid: "BLOB"
        }
    }

    /// Attributes stored as whole numbers (their sum stays whole).
    var isWhole: Bool {
        switch self {
        case .bool, .int, .int16, .int32, .int64: true
        default: false
        }
    }

    /// Attributes stored as numbers compare with each other (an `Int` attribute against `2.5`).
    var isNumeric: Bool {
        switch self {
        case .bool, .int, .int16, .int32, .int64, .double, .float: true
        default: false
        }
    }

    /// Whether a value of kind `other` may be compared with this kind.
    func isComparable(with other: AttributeKind) -> Bool {
        self == other || (isNumeric && other.isNumeric)
    }
}

/// A type that can be stored in an attribute: `Bool`, the integer types, `Double`, `Float`,
/// `String`, `Date`, `Data`, `UUID`, `URL`, `Decimal`, each also optional.
///
/// `RawRepresentable` enums whose raw value is one of these are stored through their raw
/// value; they need no conformance of their own.
public protocol AttributeValue: Sendable {
    /// The kind of attribute this type is stored as.
    static var attributeKind: AttributeKind { get }
    /// Whether `nil` is a possible value (true only for `Optional`).
    static var isOptionalAttribute: Bool { get }
    /// The stored form.
    var storedValue: Value { get }
    /// The value from its stored form; `nil` if the stored form does not fit.
    init?(storedValue: Value)
}

extension AttributeValue {
    public static var isOptionalAttribute: Bool { false }
}

extension Bool: AttributeValue {
    public static var attributeKind: AttributeKind { .bool }
    public var storedValue: Value { .integer(self ? 1 : 0) }
    public init?(storedValue: Value) {
        guard let value = storedValue.int64Value else { return nil }
        self = value != 0
    }
}

extension Int: AttributeValue {
    public static var attributeKind: AttributeKind { .int }
    public var storedValue: Value { .integer(Int64(self)) }
    public init?(storedValue: Value) {
        guard case .integer(let value) = storedValue else {
            guard let value = storedValue.int64Value else { return nil }
            self = Int(truncatingIfNeeded: value); return
        }
        self = Int(truncatingIfNeeded: value)
    }
}

extension Int16: AttributeValue {
    public static var attributeKind: AttributeKind { .int16 }
    public var storedValue: Value { .integer(Int64(self)) }
    public init?(storedValue: Value) {
        guard let value = storedValue.int64Value else { return nil }
        self = Int16(truncatingIfNeeded: value)
    }
}

extension Int32: AttributeValue {
    public static var attributeKind: AttributeKind { .int32 }
    public var storedValue: Value { .integer(Int64(self)) }
    public init?(storedValue: Value) {
        guard let value = storedValue.int64Value else { return nil }
        self = Int32(truncatingIfNeeded: value)
    }
}

extension Int64: AttributeValue {
    public static var attributeKind: AttributeKind { .int64 }
    public var storedValue: Value { .integer(self) }
    public init?(storedValue: Value) {
        guard let value = storedValue.int64Value else { return nil }
        self = value
    }
}

/// NaN is stored as NULL: SQLite has no NaN (it binds one as NULL), so memory does the same.
extension Double: AttributeValue {
    public static var attributeKind: AttributeKind { .double }
    public var storedValue: Value { isNaN ? .null : .double(self) }
    public init?(storedValue: Value) {
        guard let value = storedValue.doubleValue else { return nil }
        self = value
    }
}

/// NaN is stored as NULL, as for `Double`.
extension Float: AttributeValue {
    public static var attributeKind: AttributeKind { .float }
    public var storedValue: Value { isNaN ? .null : .double(Double(self)) }
    public init?(storedValue: Value) {
        guard let value = storedValue.doubleValue else { return nil }
        self = Float(value)
    }
}

extension String: AttributeValue {
    public static var attributeKind: AttributeKind { .string }
    public var storedValue: Value { .text(self) }
    public init?(storedValue: Value) {
        guard case .text(let value) = storedValue else { return nil }
        self = value
    }
}

/// Dates are stored as seconds since 1970-01-01 00:00:00 UTC, as a double.
extension Date: AttributeValue {
    public static var attributeKind: AttributeKind { .date }
    public var storedValue: Value { .double(timeIntervalSince1970) }
    public init?(storedValue: Value) {
        guard let value = storedValue.doubleValue else { return nil }
        self = Date(timeIntervalSince1970: value)
    }
}

extension Data: AttributeValue {
    public static var attributeKind: AttributeKind { .data }
    public var storedValue: Value { .blob(self) }
    public init?(storedValue: Value) {
        guard case .blob(let value) = storedValue else { return nil }
        self = value
    }
}

/// UUIDs are stored as their 16 bytes.
extension UUID: AttributeValue {
    public static var attributeKind: AttributeKind { .uuid }
    public var storedValue: Value { withUnsafeBytes(of: uuid) { .blob(Data($0)) } }
    public init?(storedValue: Value) {
        guard case .blob(let data) = storedValue, data.count == 16 else { return nil }
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &bytes) { $0.copyBytes(from: data) }
        self.init(uuid: bytes)
    }
}

/// URLs are stored as their absolute string.
extension URL: AttributeValue {
    public static var attributeKind: AttributeKind { .url }
    public var storedValue: Value { .text(absoluteString) }
    public init?(storedValue: Value) {
        guard case .text(let value) = storedValue, let url = URL(string: value) else { return nil }
        self = url
    }
}

/// Decimals are stored as text, exactly (`"12.50"` round-trips as 12.5). Equality works in
/// predicates; ordering comparisons and sorting on a decimal attribute are rejected, because
/// text order is not numeric order.
extension Decimal: AttributeValue {
    public static var attributeKind: AttributeKind { .decimal }
    public var storedValue: Value { .text(description) }
    public init?(storedValue: Value) {
        switch storedValue {
        case .text(let text):
            guard let value = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else { return nil }
            self = value
        case .integer(let value): self = Decimal(value)
        case .double(let value): self = Decimal(value)
        default: return nil
        }
    }
}

extension Optional: AttributeValue where Wrapped: AttributeValue {
    public static var attributeKind: AttributeKind { Wrapped.attributeKind }
    public static var isOptionalAttribute: Bool { true }
    public var storedValue: Value { self?.storedValue ?? .null }
    public init?(storedValue: Value) {
        if storedValue.isNull { self = .none; return }
        guard let value = Wrapped(storedValue: storedValue) else { return nil }
        self = .some(value)
    }
}
