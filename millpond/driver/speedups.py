"""The speed-ups millpond adds on top of Spark's and Delta's standard paths, each with the one setting that turns it
off.

A speed-up never changes a result: each has a differential test that runs it and the standard path on the same
hostile input and compares rows, quarantines, rescued fields and failures (docs/reliability.md lists them). Turning one
off is how a user rules it out when a result looks wrong, and how the benchmarks measure what it buys. The JIT
choice has its own variable with more values (`MILLPOND_DRIVER_JIT`, millpond.driver.driver_jit; `off` is its standard path).
"""

from __future__ import annotations

from dataclasses import dataclass

from millpond import settings
from millpond.spec import SpecError

ON, OFF = ("on", "true", "1", "yes"), ("off", "false", "0", "no")


@dataclass(frozen=True)
class SpeedUp:
    setting: settings.Setting
    what: str
    standard_path: str

    def enabled(self) -> bool:
        """On unless its variable says off; raises SpecError (before any JVM starts) for a value that is neither."""
        value = self.setting.choice()
        if value not in ON + OFF:
            raise SpecError(
                [
                    f"{self.env}={self.setting.value()!r} is neither on nor off. Fix: set it to on (the "
                    f"default: {self.what}) or off ({self.standard_path}), or unset it"
                ]
            )
        return value in ON

    @property
    def env(self) -> str:
        return self.setting.name


JSON_FUNCTIONS = SpeedUp(
    settings.JSON_FUNCTIONS,
    "bronze parses json lines and finds their new fields with millpond's Java functions (jvm/)",
    "Spark's from_json, and from_json into map<string,variant> for new fields and _rescued_data",
)
DELTA_RS_COMMITS = SpeedUp(
    settings.DELTA_RS_COMMITS,
    "small complete-mode overwrites and a landing batch's few bad lines are committed by delta-rs from the driver",
    "delta-spark writes every pipeline table",
)
CLASS_ARCHIVE = SpeedUp(
    settings.CLASS_ARCHIVE,
    "a run's driver JVM maps the classes of an earlier JVM from a class-data archive (millpond.driver.class_archive)",
    "the driver JVM loads every class from Spark's jars",
)
ALL = (JSON_FUNCTIONS, DELTA_RS_COMMITS, CLASS_ARCHIVE)


def check_settings() -> None:
    """Every speed-up variable is on, off or unset: a typo is an error before the lock and the JVM."""
    for speed_up in ALL:
        speed_up.enabled()


def settings_in_environment() -> dict[str, str]:
    """The speed-up variables this process has, for a Spark driver that does not inherit its environment."""
    names = [s.env for s in ALL] + [settings.DRIVER_JIT.name]
    return {name: value for name, value in settings.in_environment().items() if name in names}
