@testable import _ContextStackCore
import Foundation
import Testing

/// `Value`'s equality, order and hash on text and blobs: bytes, as SQLite's BINARY collation
/// compares them, through `memcmp` (see `Value.compareText`).
@Suite struct ValueTests {
    /// Texts whose UTF-8 differ in a byte, in length, in an embedded NUL, or only in Unicode
    /// normalization (equal to Swift's `String ==`, different bytes to SQLite).
    static let texts = ["", "a", "a\u{0}", "a\u{0}b", "ab", "abc", "abd", "B", "b", "é", "e\u{301}", "z", "Ω",
                        "a string longer than fifteen bytes", "a string longer than fifteen bytez", "🙂"]

    /// Docs/Queries.md, "Rows": doubles give integers truncated toward zero; equality is SQL's
    /// `IS`, so an integer equals the double of the same value, and the two hash alike.
    @Test func numbersCompareAsSQLDoesAndTruncateTowardZero() {
        #expect(Value.double(-2.7).int64Value == -2 && Value.double(2.7).intValue == 2)
        #expect(Value.integer(2) == .double(2.0) && Value.integer(2) != .double(2.5))
        #expect(Set<Value>([.integer(2), .double(2)]).count == 1)
        #expect(Value.text("2").int64Value == nil && Value.integer(1).stringValue == nil)
    }

    @Test func textsCompareByTheirBytes() {
        for a in Self.texts {
            for b in Self.texts {
                let expected = a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : (Array(a.utf8) == Array(b.utf8) ? 0 : 1)
                #expect(Value.compare(.text(a), .text(b)) == expected, "\(a.debugDescription) vs \(b.debugDescription)")
                #expect((Value.text(a) == Value.text(b)) == (expected == 0))
                #expect(Value.text(a).isIdentical(to: .text(b)) == (expected == 0))
            }
        }
        #expect(Value.text("é") != Value.text("e\u{301}"))
    }

    @Test func equalTextsHashAlikeHoweverTheyWereMade() {
        // A small string (inline), the same bytes built up into a native buffer, and one made
        // from bytes: equal values, one hash.
        let small = "name-12"
        var built = "name-"
        built.append(String(12))
        let decoded = String(decoding: Array("name-12".utf8), as: UTF8.self)
        let long = String(repeating: "x", count: 40)
        let longBuilt = (0..<40).map { _ in "x" }.joined()
        for (a, b) in [(small, built), (small, decoded), (long, longBuilt)] {
            #expect(Value.text(a) == Value.text(b))
            #expect(Value.text(a).hashValue == Value.text(b).hashValue)
        }
        let keys: Set<Value> = [.text(small), .text(built), .text(decoded), .text("e\u{301}"), .text("é")]
        #expect(keys.count == 3)
    }

    @Test func blobsCompareByTheirBytes() {
        let blobs = [Data(), Data([0]), Data([0, 0]), Data([0, 1]), Data([1]), Data([255])]
        for (i, a) in blobs.enumerated() {
            for (j, b) in blobs.enumerated() {
                #expect(Value.compare(.blob(a), .blob(b)) == (i < j ? -1 : (i == j ? 0 : 1)))
            }
        }
        #expect(Value.compare(.text("z"), .blob(Data())) == -1)
    }
}
