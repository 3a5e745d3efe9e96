import Foundation

/// A value as SQLite stores it: the currency of the store, of object slots, of query rows
/// and of in-memory predicate evaluation.
///
/// Because objects hold exactly what the store holds, a predicate has one meaning in SQL and in
/// memory: both compare `Value`s with SQLite's rules (NULL before numbers, numbers compared
/// numerically, then text by bytes, then blobs by bytes).
///
/// For example:
///
/// ```swift
/// let avg: Value = try world.queryValue(Person.self, .average("age"))
/// print(avg.doubleValue ?? 0)
/// ```
public enum Value: Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case double(Double)
    case text(String)
    case blob(Data)

    /// True for `.null`.
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as an `Int64`: integers as they are, doubles truncated, otherwise `nil`.
    public var int64Value: Int64? {
        switch self {
        case .integer(let value): value
        case .double(let value): Int64(exactly: value.rounded(.towardZero))
        default: nil
        }
    }

    /// The value as an `Int`, like `int64Value`.
    public var intValue: Int? { int64Value.map { Int(truncatingIfNeeded: $0) } }

    /// The value as a `Double`: numbers converted, otherwise `nil`.
    public var doubleValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The text, or `nil` for anything else.
    public var stringValue: String? { if case .text(let value) = self { value } else { nil } }

    /// The bytes, or `nil` for anything else.
    public var dataValue: Data? { if case .blob(let value) = self { value } else { nil } }

    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let value): String(value)
        case .double(let value): String(value)
        case .text(let value): String(reflecting: value)
        case .blob(let value): "<\(value.count) bytes>"
        }
    }
}

extension Value: Hashable {
    /// Equality as SQLite's `IS`: the same storage class and the same bytes, except that an
    /// integer and a double are equal when numerically equal. Text is compared by its UTF-8
    /// bytes, not by Unicode canonical equivalence (Swift's `String ==`), as SQLite does.
    public static func == (lhs: Value, rhs: Value) -> Bool { compare(lhs, rhs) == 0 }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .integer(let value): hasher.combine(Double(value))
        case .double(let value): hasher.combine(value)
        case .text(let value):
            hasher.combine(2)
            var text = value
            text.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        case .blob(let value): hasher.combine(3); hasher.combine(value)
        }
    }

    /// Whether two values are stored identically: the same storage class and the same
    /// content (so `1` and `1.0` differ, as they do in a column). Change detection and
    /// optimistic locking use it; predicates use `==`.
    package func isIdentical(to other: Value) -> Bool {
        switch (self, other) {
        case (.null, .null): true
        case (.integer(let a), .integer(let b)): a == b
        case (.double(let a), .double(let b)): a == b || (a.isNaN && b.isNaN)
        case (.text(let a), .text(let b)): Self.compareText(a, b) == 0
        case (.blob(let a), .blob(let b)): a == b
        default: false
        }
    }

    /// SQLite's ordering of two values: `-1`, `0` or `1`.
    ///
    /// NULL sorts first, then integers and doubles compared numerically, then text by bytes
    /// (the BINARY collation), then blobs by bytes.
    package static func compare(_ lhs: Value, _ rhs: Value) -> Int {
        switch (lhs, rhs) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case (.integer(let a), .integer(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.double(let a), .double(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.integer(let a), .double(let b)): return -compareNumeric(b, a)
        case (.double(let a), .integer(let b)): return compareNumeric(a, b)
        case (.integer, _), (.double, _): return -1
        case (_, .integer), (_, .double): return 1
        case (.text(let a), .text(let b)): return compareText(a, b)
        case (.text, .blob): return -1
        case (.blob, .text): return 1
        case (.blob(let a), .blob(let b)): return a.withUnsafeBytes { x in b.withUnsafeBytes { y in compareBytes(x, y) } }
        }
    }

    /// Compares a double with an integer exactly, as SQLite does (no rounding through `Double`).
    private static func compareNumeric(_ a: Double, _ b: Int64) -> Int {
        if a.isNaN { return -1 }
        if a < -9.223372036854775808e18 { return -1 }
        if a >= 9.223372036854775808e18 { return 1 }
        let truncated = Int64(a.rounded(.towardZero))
        if truncated != b { return truncated < b ? -1 : 1 }
        let fraction = a - Double(truncated)
        return fraction > 0 ? 1 : (fraction < 0 ? -1 : 0)
    }

    /// Two texts by their UTF-8 bytes. `withUTF8` hands out a string's own bytes (a native
    /// string's always lie in one piece), so this is one `memcmp`, not a loop of iterators,
    /// which change detection, unique keys and sorting in memory paid for every text.
    @inline(__always)
    private static func compareText(_ a: String, _ b: String) -> Int {
        var left = a, right = b
        return left.withUTF8 { x in right.withUTF8 { y in compareBytes(UnsafeRawBufferPointer(x), UnsafeRawBufferPointer(y)) } }
    }

    /// Two runs of bytes, as `memcmp` orders them; a run that is a prefix of the other first.
    private static func compareBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let common = min(a.count, b.count)
        if common > 0 {
            let order = memcmp(a.baseAddress!, b.baseAddress!, common)
            if order != 0 { return order < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}

extension Value: ExpressibleByNilLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByStringLiteral, ExpressibleByBooleanLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(booleanLiteral value: Bool) { self = .integer(value ? 1 : 0) }
}

extension ContiguousArray where Element == Value {
    /// `count` NULLs: an object's or a row's slots before they are filled.
    ///
    /// Made by reserving and appending, which the compiler specializes for `Value` here, so the
    /// storage's type is looked up once and cached. `init(repeating:count:)` allocates through
    /// the standard library's unspecialized `_allocateBufferUninitialized`, which looks the
    /// type of `_ContiguousArrayStorage<Value>` up in the runtime's metadata cache on every
    /// call: 4 % of a 100,000-object fetch, once for each row.
    package static func nulls(_ count: Int) -> ContiguousArray<Value> {
        var values = ContiguousArray<Value>()
        values.reserveCapacity(count)
        for _ in 0..<count { values.append(.null) }
        return values
    }
}
