package millpond.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Function1;
import scala.Option;
import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * millpond's SQL functions, added to every session through {@code spark.sql.extensions} (beside Delta's).
 *
 * <p>Each is a {@link StaticInvoke} of a static Java method: whole-stage codegen calls the method directly, where a
 * Python or Java UDF would convert every row to and from JVM objects.
 */
public final class MillpondExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public static final String UNKNOWN_JSON_KEYS = "millpond_unknown_json_keys";
  public static final String PARSE_JSON_LINE = "millpond_parse_json_line";
  public static final String JSON_FIELDS = "millpond_json_fields";

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    ExpressionInfo info = new ExpressionInfo(JsonLineKeys.class.getName(), null, UNKNOWN_JSON_KEYS,
        "_FUNC_(line, known_names, options) - the JSON object line's top-level keys not in known_names, or null if none", "",
        "", "", "", "", "", "");
    Function1<Seq<Expression>, Expression> build = MillpondExtensions::unknownJsonKeys;
    extensions.injectFunction(new Tuple3<>(new FunctionIdentifier(UNKNOWN_JSON_KEYS), info, build));
    ExpressionInfo parseInfo = new ExpressionInfo(JsonLineParser.class.getName(), null, PARSE_JSON_LINE,
        "_FUNC_(line, schema_json, options) - from_json(line, schema, options) parsed from the line's UTF-8 bytes", "",
        "", "", "", "", "", "");
    Function1<Seq<Expression>, Expression> buildParse = MillpondExtensions::parseJsonLine;
    extensions.injectFunction(new Tuple3<>(new FunctionIdentifier(PARSE_JSON_LINE), parseInfo, buildParse));
    ExpressionInfo fieldsInfo = new ExpressionInfo(JsonLineFields.class.getName(), null, JSON_FIELDS,
        "_FUNC_(line, names, options) - the line's top-level fields in names, as a JSON object, or null if none",
        "", "", "", "", "", "", "");
    Function1<Seq<Expression>, Expression> buildFields = MillpondExtensions::jsonFields;
    extensions.injectFunction(new Tuple3<>(new FunctionIdentifier(JSON_FIELDS), fieldsInfo, buildFields));
    return BoxedUnit.UNIT;
  }

  private static Expression parseJsonLine(Seq<Expression> arguments) {
    if (arguments.size() != 3 || !arguments.apply(1).foldable()) {
      throw new IllegalArgumentException(PARSE_JSON_LINE + " takes 3 arguments (line, schema_json literal, options)");
    }
    UTF8String schemaJson = (UTF8String) arguments.apply(1).eval(null);
    return new StaticInvoke(JsonLineParser.class, JsonLineParser.schema(schemaJson), "parse", arguments,
        StaticInvoke.$lessinit$greater$default$5(), true, true, true, Option.empty());
  }

  private static Expression jsonFields(Seq<Expression> arguments) {
    if (arguments.size() != 3) {
      throw new IllegalArgumentException(JSON_FIELDS + " takes 3 arguments (line, names, options), got "
          + arguments.size());
    }
    return new StaticInvoke(JsonLineFields.class, DataTypes.StringType, "fieldsNamed", arguments,
        StaticInvoke.$lessinit$greater$default$5(), true, true, true, Option.empty());
  }

  private static Expression unknownJsonKeys(Seq<Expression> arguments) {
    if (arguments.size() != 3) {
      throw new IllegalArgumentException(UNKNOWN_JSON_KEYS + " takes 3 arguments (line, known_names, options), got "
          + arguments.size());
    }
    return new StaticInvoke(JsonLineKeys.class, DataTypes.createArrayType(DataTypes.StringType, false),
        "unknownTopLevelKeys", arguments, StaticInvoke.$lessinit$greater$default$5(), true, true, true,
        Option.empty());
  }
}
