package millpond.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * from_json for one line, parsed from its UTF-8 bytes: Spark's JacksonParser and FailureSafeParser, built as from_json
 * builds them, with Jackson's byte parser under them instead of its char parser.
 *
 * <p>from_json wraps each line in an InputStreamReader (so that invalid UTF-8 becomes U+FFFD) and Jackson reads the
 * decoded chars (bench/parse_cost.py times both parses in bronze's writer). Bronze parses
 * only lines already checked to be valid UTF-8, for which the rows are the same; an invalid line is a corrupt record
 * here, where from_json may accept it with U+FFFD in place of its bad bytes.
 */
public final class JsonLineParser {
  private static final PerTask<FailureSafeParser<UTF8String>> PARSERS = new PerTask<>();

  private JsonLineParser() {}

  /**
   * The line parsed against the schema (given as its JSON), with the options from_json takes (PERMISSIVE and its
   * corrupt-record column included): the row from_json would return.
   */
  public static InternalRow parse(UTF8String line, UTF8String schemaJson, MapData options) {
    Iterator<InternalRow> rows = parser(schemaJson, options).parse(line);
    return rows.hasNext() ? rows.next() : null;
  }

  /** The schema a call returns, read when the function is built (its second argument must be a literal). */
  public static StructType schema(UTF8String schemaJson) {
    return (StructType) DataType.fromJson(schemaJson.toString());
  }

  /**
   * The task's parser for these literal arguments, built under the task's SQL settings (PerTask): JacksonParser reads
   * the session's time parser policy and ANSI mode when it is built.
   */
  private static FailureSafeParser<UTF8String> parser(UTF8String schemaJson, MapData options) {
    return PARSERS.get(schemaJson, options, () -> build(schema(schemaJson), asMap(options)));
  }

  /** As from_json (JsonToStructsEvaluator) builds it, but with the byte parser. */
  private static FailureSafeParser<UTF8String> build(StructType schema, Map<String, String> options) {
    JSONOptions parsed = jsonOptions(options);
    String corrupt = parsed.columnNameOfCorruptRecord();
    StructType fields = new StructType(java.util.Arrays.stream(schema.fields())
        .filter(field -> !field.name().equals(corrupt)).toArray(org.apache.spark.sql.types.StructField[]::new));
    JacksonParser raw = new JacksonParser(fields, parsed, false, JacksonParser.$lessinit$greater$default$4());
    return new FailureSafeParser<>(line -> raw.parse(line, JsonLineParser::bytesParser, record -> record),
        parsed.parseMode(), schema, corrupt);
  }

  /** The options as from_json reads them (the session time zone comes in the map, as parse_json_line passes it). */
  static JSONOptions jsonOptions(Map<String, String> options) {
    return new JSONOptions(scala.collection.immutable.Map.from(CollectionConverters.asScala(options)),
        options.getOrDefault("timeZone", "UTC"), "_corrupt_record");
  }

  /**
   * The line's bytes as a stream, not as a byte array: JacksonParser copies a STRING field's nested object or array
   * verbatim from a byte array (as spark.read.json does) but re-serializes it from anything else, as from_json does.
   * Jackson guesses the encoding from the first four bytes (a NUL among them means UTF-16 or UTF-32, and a UTF-8
   * byte-order mark is skipped): such lines get from_json's reader, so that they parse exactly as from_json's do.
   */
  static JsonParser bytesParser(JsonFactory factory, UTF8String line) {
    if (!plainUtf8Start(line)) {
      return CreateJacksonParser.utf8String(factory, line);
    }
    try {
      if (line.getBaseObject() instanceof byte[] bytes) {
        int start = (int) (line.getBaseOffset() - Platform.BYTE_ARRAY_OFFSET);
        return factory.createParser(new ByteArrayInputStream(bytes, start, line.numBytes()));
      }
      return factory.createParser(new ByteArrayInputStream(line.getBytes()));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static boolean plainUtf8Start(UTF8String line) {
    int head = Math.min(4, line.numBytes());
    for (int i = 0; i < head; i++) {
      if (line.getByte(i) == 0) {
        return false;
      }
    }
    return !(head >= 3 && line.getByte(0) == (byte) 0xEF && line.getByte(1) == (byte) 0xBB
        && line.getByte(2) == (byte) 0xBF);
  }

  static Map<String, String> asMap(MapData options) {
    Map<String, String> map = new HashMap<>();
    for (int i = 0; i < options.numElements(); i++) {
      map.put(options.keyArray().getUTF8String(i).toString(), options.valueArray().getUTF8String(i).toString());
    }
    return map;
  }
}
