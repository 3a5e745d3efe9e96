import _ContextStackCore
import CLibpq
import Foundation

/// The type OIDs ContextStack sends and reads (PostgreSQL's `pg_type.dat`).
enum PostgresType {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let oid: UInt32 = 26
    static let float4: UInt32 = 700
    static let float8: UInt32 = 701
    static let numeric: UInt32 = 1700
    /// No type: the server infers one from where the parameter is used (what NULL is sent as).
    static let unspecified: UInt32 = 0
}

/// Statement arguments as libpq takes them: one contiguous buffer of values, their lengths and
/// formats, and the types the statement is prepared with.
///
/// Integers (`int8`) and doubles (`float8`) go in binary format, eight bytes in network order:
/// exact, and nothing to format (writing them as text — `String(integer)`, the shortest digits
/// of a double — was a third of building a commit's parameters, which was a tenth of a
/// one-object commit's instructions). Text goes in text format, NUL-terminated in the buffer;
/// blobs as raw bytes in binary format (`bytea`), so no hex round trip; NULL is a null pointer
/// with no type, which the server infers from the parameter's use.
struct PostgresParameters {
    private(set) var types: [UInt32] = []
    private var bytes: [UInt8] = []
    private var offsets: [Int] = []
    private var lengths: [Int32] = []
    private var formats: [Int32] = []
    /// Where each value starts, for libpq; made by `withPointers`.
    private var pointers: [UnsafePointer<CChar>?] = []

    /// No arguments yet: a connection keeps one and `fill`s it for each statement, so that its
    /// arrays are allocated once (six allocations a statement were a tenth of a one-object
    /// commit's instructions).
    init() {}

    /// Replaces the arguments with `values`, keeping the arrays' memory.
    /// - Throws: `PostgresError` with `.characterNotInRepertoire` for text holding U+0000,
    ///   which PostgreSQL's text cannot store (libpq would cut it off there, silently); the
    ///   arguments are then incomplete, for no statement to use.
    mutating func fill(_ values: [Value]) throws(PostgresError) {
        types.removeAll(keepingCapacity: true)
        bytes.removeAll(keepingCapacity: true)
        offsets.removeAll(keepingCapacity: true)
        lengths.removeAll(keepingCapacity: true)
        formats.removeAll(keepingCapacity: true)
        types.reserveCapacity(values.count)
        offsets.reserveCapacity(values.count)
        lengths.reserveCapacity(values.count)
        formats.reserveCapacity(values.count)
        bytes.reserveCapacity(values.count * 16 + 1)
        for value in values {
            switch value {
            case .null:
                types.append(PostgresType.unspecified)
                offsets.append(-1)
                lengths.append(0)
                formats.append(0)
            case .integer(let integer):
                types.append(PostgresType.int8)
                appendBinary(UInt64(bitPattern: integer))
            case .double(let double):
                types.append(PostgresType.float8)
                appendBinary(double.bitPattern)
            case .text(var text):
                // Through its UTF-8 bytes, contiguous even for a short text held inline (whose
                // `utf8` view went byte by byte into the buffer).
                let holdsNUL = text.withUTF8 { utf8 -> Bool in
                    guard utf8.isEmpty || memchr(utf8.baseAddress!, 0, utf8.count) == nil else { return true }
                    appendText(utf8)
                    return false
                }
                if holdsNUL {
                    throw PostgresError(code: .characterNotInRepertoire, message: "a text value holds the NUL character (U+0000), which PostgreSQL cannot store in text: remove it, or keep such values as Data")
                }
                types.append(PostgresType.text)
            case .blob(let data):
                types.append(PostgresType.bytea)
                offsets.append(bytes.count)
                lengths.append(Int32(data.count))
                formats.append(1)
                bytes.append(contentsOf: data)
            }
        }
        bytes.append(0) // never empty, so every offset has an address
    }

    private mutating func appendText(_ utf8: UnsafeBufferPointer<UInt8>) {
        offsets.append(bytes.count)
        bytes.append(contentsOf: utf8)
        bytes.append(0)
        lengths.append(0) // ignored for text format
        formats.append(0)
    }

    /// `int8`'s or `float8`'s binary form: the 64 bits, most significant byte first (what
    /// `int8recv` and `float8recv` read; a double's bits are IEEE 754's, NaN and the
    /// infinities included).
    private mutating func appendBinary(_ bits: UInt64) {
        offsets.append(bytes.count)
        withUnsafeBytes(of: bits.bigEndian) { bytes.append(contentsOf: $0) }
        lengths.append(8)
        formats.append(1)
    }

    /// Calls `body` with libpq's `nParams`, `paramValues`, `paramLengths` and `paramFormats`.
    mutating func withPointers<R>(_ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R) -> R {
        let count = Int32(types.count)
        pointers.removeAll(keepingCapacity: true)
        return bytes.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress!)
            for offset in offsets {
                pointers.append(offset < 0 ? nil : (base + offset).assumingMemoryBound(to: CChar.self))
            }
            return pointers.withUnsafeBufferPointer { values in
                lengths.withUnsafeBufferPointer { lengths in
                    formats.withUnsafeBufferPointer { formats in
                        body(count, values.baseAddress, lengths.baseAddress, formats.baseAddress)
                    }
                }
            }
        }
    }
}

/// The current row of a query result, read by its columns' types.
///
/// Results come in text format. Integers, booleans (as 1 and 0, as SQLite stores them) and
/// OIDs become `.integer`; `float4`, `float8` and `numeric` (what `avg` and `sum` of integers
/// return) become `.double`; `bytea` becomes `.blob`; everything else `.text`. The same values
/// a SQLite store would hand back for the same schema.
package final class PostgresRow: QueryRow {
    private enum Kind { case integer, boolean, double, blob, text }

    private let result: OpaquePointer
    private let kinds: [Kind]
    var index: Int32 = 0

    init(result: OpaquePointer) {
        self.result = result
        kinds = (0..<PQnfields(result)).map { column in
            switch PQftype(result, column) {
            case PostgresType.int8, PostgresType.int4, PostgresType.int2, PostgresType.oid: .integer
            case PostgresType.bool: .boolean
            case PostgresType.float8, PostgresType.float4, PostgresType.numeric: .double
            case PostgresType.bytea: .blob
            default: .text
            }
        }
    }

    /// The number of columns.
    package var columnCount: Int { kinds.count }

    package func isNull(_ column: Int) -> Bool {
        PQgetisnull(result, index, Int32(column)) == 1
    }

    package func value(_ column: Int) -> Value {
        // A column the result does not have reads as NULL, as libpq answers for it.
        guard kinds.indices.contains(column) else { return .null }
        return Self.value(result, index, Int32(column), kinds[column])
    }

    /// Field `field` of row `row`, read as `kind` says.
    @inline(__always)
    private static func value(_ result: OpaquePointer, _ row: Int32, _ field: Int32, _ kind: Kind) -> Value {
        let length = Int(PQgetlength(result, row, field))
        // NULL reads as an empty value: only an empty one needs asking.
        if length == 0 && PQgetisnull(result, row, field) == 1 { return .null }
        let start = UnsafeRawPointer(PQgetvalue(result, row, field)!)
        let bytes = UnsafeRawBufferPointer(start: start, count: length)
        switch kind {
        case .integer:
            return Self.integer(bytes).map(Value.integer) ?? .text(String(decoding: bytes, as: UTF8.self))
        case .boolean:
            return .integer(bytes.first == UInt8(ascii: "t") ? 1 : 0)
        case .double:
            return .double(Self.double(start, count: length))
        case .blob:
            return .blob(Self.bytea(bytes))
        case .text:
            return .text(String(decoding: bytes, as: UTF8.self))
        }
    }

    package func int64(_ column: Int) -> Int64 {
        // An integer column's digits, parsed where they lie: every row's key is read this way.
        let field = Int32(column)
        if kinds[column] == .integer, PQgetisnull(result, index, field) == 0,
           let integer = Self.integer(UnsafeRawBufferPointer(start: PQgetvalue(result, index, field), count: Int(PQgetlength(result, index, field)))) {
            return integer
        }
        return switch value(column) {
        case .integer(let integer): integer
        case .double(let double): Int64(exactly: double.rounded(.towardZero)) ?? 0
        case .text(let text): Int64(text) ?? 0
        case .null, .blob: 0
        }
    }

    package func read(_ layout: ColumnSlots, into values: inout ContiguousArray<Value>) {
        // Every row of a fetch comes through here: the arrays are opened once a row, not once a
        // column (`values` was checked for uniqueness at every assignment).
        let (result, row, positions, slots) = (result, index, layout.positions, layout.slots)
        kinds.withUnsafeBufferPointer { kinds in
            values.withUnsafeMutableBufferPointer { values in
                for index in 0..<positions.count {
                    let (column, slot) = (positions[index], slots[index])
                    precondition(UInt(bitPattern: column) < UInt(kinds.count) && UInt(bitPattern: slot) < UInt(values.count), "unreachable: a row's positions and slots come from its entity")
                    values[slot] = Self.value(result, row, Int32(truncatingIfNeeded: column), kinds[column])
                }
            }
        }
    }

    /// A decimal integer, without going through `String`: an optional `-` and digits, as
    /// `int8out` writes them; `nil` for anything else or a value past `Int64`.
    static func integer(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard var index = bytes.indices.first else { return nil }
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < bytes.count, bytes.count - index <= 19 else { return longInteger(bytes) }
        // Up to 19 digits cannot overflow a UInt64.
        var magnitude: UInt64 = 0
        while index < bytes.count {
            let digit = bytes[index] &- UInt8(ascii: "0")
            guard digit <= 9 else { return nil }
            magnitude = magnitude &* 10 &+ UInt64(digit)
            index += 1
        }
        if negative { return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// `integer` for more than 19 digits (leading zeros, or a value past `Int64`).
    private static func longInteger(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard let first = bytes.first else { return nil }
        let negative = first == UInt8(ascii: "-")
        let digits = bytes.dropFirst(negative ? 1 : 0)
        guard !digits.isEmpty else { return nil }
        var magnitude: UInt64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { return nil }
            magnitude = sum
        }
        if negative {
            return magnitude <= UInt64(Int64.max) + 1 ? Int64(truncatingIfNeeded: 0 &- magnitude) : nil
        }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// `float8`'s output syntax: digits, or `Infinity`, `-Infinity`, `NaN` (which `strtod`
    /// reads as well), at `start`, NUL-terminated as libpq keeps every value. Parsed where it
    /// lies, in the C locale whatever the process's locale is: going through `String` took a
    /// quarter of reading a row.
    static func double(_ start: UnsafeRawPointer, count: Int) -> Double {
        if let double = shortDecimal(UnsafeRawBufferPointer(start: start, count: count)) { return double }
        let text = start.assumingMemoryBound(to: CChar.self)
        var end: UnsafeMutablePointer<CChar>?
        let double = strtod_l(text, &end, cLocale)
        guard let end, UnsafeRawPointer(end) == start + count, count > 0 else { return .nan }
        return double
    }

    /// A decimal without an exponent whose digits, read as one integer, fit a double exactly
    /// (`-12.375`, `0.5`): that integer divided by a power of ten, both exact, which IEEE
    /// division rounds correctly, so the double `strtod` would read (Clinger's fast path).
    /// `nil` for anything else: more digits, an exponent, `NaN`, the infinities.
    static func shortDecimal(_ bytes: UnsafeRawBufferPointer) -> Double? {
        var index = 0
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { index = 1 }
        guard bytes.count - index <= 20 else { return nil } // 19 digits and a point cannot overflow
        var mantissa: UInt64 = 0
        var digits = 0
        var fractionDigits = -1 // -1 until the point
        while index < bytes.count {
            let byte = bytes[index]
            let digit = byte &- UInt8(ascii: "0")
            if digit <= 9 {
                mantissa = mantissa &* 10 &+ UInt64(digit)
                digits += 1
                if fractionDigits >= 0 { fractionDigits += 1 }
            } else if byte == UInt8(ascii: "."), fractionDigits < 0 {
                fractionDigits = 0
            } else {
                return nil
            }
            index += 1
        }
        guard digits > 0, digits <= 19, mantissa <= 1 << 53 else { return nil }
        let magnitude = Double(mantissa) / powersOfTen[max(fractionDigits, 0)]
        return negative ? -magnitude : magnitude
    }

    /// 10⁰ … 10¹⁹, each exact in a double (so is every power up to 10²²).
    private static let powersOfTen: [Double] = (0...19).map { exponent in (0..<exponent).reduce(1.0) { product, _ in product * 10 } }

    /// The C locale, for `strtod_l`. Made once and never changed or freed, and glibc's locale
    /// objects may be read from any thread: nothing else protects it, nothing needs to.
    nonisolated(unsafe) private static let cLocale = newlocale(LC_NUMERIC_MASK, "C", nil)

    /// `bytea`'s hex output format, `\x0a1b…`.
    static func bytea(_ bytes: UnsafeRawBufferPointer) -> Data {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"), bytes[1] == UInt8(ascii: "x") else { return Data(bytes) }
        func nibble(_ byte: UInt8) -> UInt8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            default: (byte &- UInt8(ascii: "A")) &+ 10
            }
        }
        var data = Data(capacity: (bytes.count - 2) / 2)
        var index = 2
        while index + 1 < bytes.count {
            data.append(nibble(bytes[index]) << 4 | nibble(bytes[index + 1]))
            index += 2
        }
        return data
    }
}
