"""The calculator's tests: the quickstart's verification runs them after every implementing run."""

import unittest

import calc


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(calc.add(2, 3), 5)

    def test_multiply(self) -> None:
        self.assertEqual(calc.multiply(4, 2.5), 10)

    def test_divide(self) -> None:
        self.assertEqual(calc.divide(9, 3), 3)


if __name__ == "__main__":
    unittest.main()
