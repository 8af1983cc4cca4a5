"""Durations: the one grammar every leasegate client and the CLI read (no server needed)."""

import datetime
import unittest

from leasegate.durations import MAX_MS, millis, seconds


class DurationTest(unittest.TestCase):
    def test_spellings(self):
        self.assertEqual(millis("250ms"), 250)
        self.assertEqual(millis("15s"), 15000)
        self.assertEqual(millis("2m"), 120000)
        self.assertEqual(millis("1h"), 3600000)
        self.assertEqual(millis("0s"), 0)
        self.assertEqual(millis("1.5s"), 1500)
        self.assertEqual(millis("0.25m"), 15000)
        self.assertEqual(millis("2.000ms"), 2)
        self.assertEqual(millis(datetime.timedelta(milliseconds=20)), 20)
        self.assertEqual(millis("%dms" % MAX_MS), MAX_MS)
        self.assertEqual(seconds("1.5s"), 1.5)

    def test_bare_numbers_are_refused_with_value_error(self):
        for bare in (0, 15, 1.5, -1, float("inf"), "15", "0", "1.5", "-3", "+4"):
            with self.subTest(value=bare), self.assertRaises(ValueError) as cm:
                millis(bare, "ttl")
            self.assertIn("ttl: ", str(cm.exception))
            self.assertIn("no unit", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            millis(15, "ttl")
        self.assertIn("'15ms', '15s', '15m' or '15h'", str(cm.exception))

    def test_malformed_strings_are_refused_with_value_error(self):
        for bad in ("1d", "-1s", "+1s", "", "s", " 15s", "15s ", "15 s", "1e3ms", ".5s", "5.s", "1.5ms",
                    "0.0001s", "15S", "\u0661\u0665s", "15s\n", "%dms" % (MAX_MS + 1), "9999999999999h"):
            with self.subTest(value=bad):
                self.assertRaises(ValueError, millis, bad)
        self.assertRaises(ValueError, millis, datetime.timedelta(milliseconds=-1))
        self.assertRaises(ValueError, millis, datetime.timedelta(microseconds=1500))

    def test_other_types_are_refused_with_type_error(self):
        for bad in (None, True, False, [], {}, b"15s"):
            with self.subTest(value=bad):
                self.assertRaises(TypeError, millis, bad)


if __name__ == "__main__":
    unittest.main()
