"""`labzarr init`: a first spec for a new delivery, measured on its files (`scaffold`), from pure parts:
candidate ID patterns tried (`ids`), the label workbook found (`workbook`), the file's text (`template`)."""

from .scaffold import InitResult, init_delivery

__all__ = ["InitResult", "init_delivery"]
