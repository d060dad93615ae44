package millpond.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The top-level keys of a JSON object line that a schema does not name, found in one pass over the line's bytes.
 *
 * <p>Bronze needs them for every line (schema drift: rescue, add, fail). Spark's built-ins take several passes
 * (json_object_keys parses the line again; counting {@code ":} with replace compares bytes at every position), which
 * made the check a fifth of bronze's writer time (bench B3). This scan tracks only strings and nesting depth.
 */
public final class JsonLineKeys {
  private static final JsonFactory JSON = new JsonFactory();
  private static final ThreadLocal<KnownNames> LAST_KNOWN = new ThreadLocal<>();

  private JsonLineKeys() {}

  /** The schema's field names, rebuilt only when the (literal, per-plan) array changes. */
  private record KnownNames(ArrayData source, Set<UTF8String> names) {}

  /**
   * The line's top-level keys not in {@code known}, in first-seen order without repeats, or null when there are
   * none, or when the line is not one complete JSON object. Keys are compared unescaped, as json_object_keys returns
   * them. Never throws: a malformed line is the parse's to report, not this scan's.
   */
  public static ArrayData unknownTopLevelKeys(UTF8String line, ArrayData known) {
    Set<UTF8String> names = knownNames(known);
    Object base = line.getBaseObject();
    long offset = line.getBaseOffset();
    int length = line.numBytes();
    int i = 0;
    while (i < length && isWhitespace(Platform.getByte(base, offset + i))) {
      i++;
    }
    if (i >= length || Platform.getByte(base, offset + i) != '{') {
      return null;
    }
    List<UTF8String> unknown = null;
    int depth = 0;
    while (i < length) {
      byte b = Platform.getByte(base, offset + i);
      if (b == '"') {
        int start = ++i;
        boolean escaped = false;
        while (i < length) {
          byte c = Platform.getByte(base, offset + i);
          if (c == '\\') {
            escaped = true;
            i += 2;
          } else if (c == '"') {
            break;
          } else {
            i++;
          }
        }
        if (i >= length) {
          break;  // an unterminated string: the parse rejects the line
        }
        int end = i++;
        if (depth == 1) {
          int colon = i;
          while (colon < length && isWhitespace(Platform.getByte(base, offset + colon))) {
            colon++;
          }
          if (colon < length && Platform.getByte(base, offset + colon) == ':') {
            UTF8String key = escaped ? unescape(line, start - 1, end + 1)
                : UTF8String.fromAddress(base, offset + start, end - start);
            if (key != null && !names.contains(key) && (unknown == null || !unknown.contains(key))) {
              if (unknown == null) {
                unknown = new ArrayList<>(2);
              }
              unknown.add(key.copy());
            }
            i = colon + 1;
          }
        }
      } else {
        if (b == '{' || b == '[') {
          depth++;
        } else if ((b == '}' || b == ']') && --depth == 0) {
          break;  // the end of the top-level object: what follows is not its keys
        }
        i++;
      }
    }
    if (depth != 0) {
      return null;  // the object never ends (truncated, or an unterminated string): not one JSON object
    }
    return unknown == null ? null : new GenericArrayData(unknown.toArray());
  }

  private static boolean isWhitespace(byte b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
  }

  /** A key written with escapes ({@code "dev\u0069ce"}), as JSON reads it; null if it is not a valid string. */
  private static UTF8String unescape(UTF8String line, int quote, int endQuote) {
    byte[] quoted = new byte[endQuote - quote + 1];
    Platform.copyMemory(line.getBaseObject(), line.getBaseOffset() + quote, quoted, Platform.BYTE_ARRAY_OFFSET,
        quoted.length);
    try (JsonParser parser = JSON.createParser(quoted)) {
      parser.nextToken();
      return UTF8String.fromString(parser.getText());
    } catch (Exception malformed) {
      return null;
    }
  }

  private static Set<UTF8String> knownNames(ArrayData known) {
    KnownNames last = LAST_KNOWN.get();
    if (last != null && last.source() == known) {
      return last.names();
    }
    Set<UTF8String> names = new HashSet<>();
    for (int k = 0; k < known.numElements(); k++) {
      names.add(known.getUTF8String(k).copy());
    }
    LAST_KNOWN.set(new KnownNames(known, names));
    return names;
  }
}
