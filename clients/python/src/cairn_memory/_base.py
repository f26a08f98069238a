"""The base of every generated model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CairnModel(BaseModel):
    """A model of one of Cairn's JSON objects.

    Fields the model does not know are kept (``model_extra``) rather than rejected, so an
    older client keeps reading a newer server; the test suite checks that the server sends
    none (``tests/conftest.py``), so such drift is caught here first.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())
