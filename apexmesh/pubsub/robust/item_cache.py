"""A subscriber's last value per item, kept as the publish types define (XEP-0040 3.1:
"the above states are very important for downstream caches and for applications that
apply business logic to the datastreams").

The stub delivers publications in order, once; an application that holds data items
(quotes, process states) wants the current value of each, not the stream of changes.
:class:`ItemCache` folds each publication into its item's image with the service's own
rule (:func:`apexmesh.pubsub.robust.publish_types.fold`): ``update`` and ``correction``
replace the fields they carry, ``image`` replaces the item, ``drop`` deletes it; a
publication without an item is the datastream's, not an item's, and leaves the cache
alone. :meth:`ItemCache.load` takes a snapshot's images (a new subscriber asks for them
first), keeping what it already holds that is newer. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from apexmesh.pubsub.robust.publish_types import Image, PublishType, fields_of_payload, fold
from apexmesh.pubsub.robust.stub_events import Publication


class ItemCache(Mapping[str, Image]):
    """item -> its current image."""

    def __init__(self) -> None:
        self._images: dict[str, Image] = {}

    def apply(self, publication: Publication) -> Image | None:
        """Fold one publication in; its item's image after it (None: no item, or the
        item was dropped)."""
        item = publication.item
        if item is None or publication.type is PublishType.SNAPSHOT:
            return None
        image = fold(
            self._images.get(item),
            publication.type,
            item=item,
            fields=fields_of_payload(publication.payload),
            source=str(publication.source),
            source_seq=publication.source_seq,
        )
        if image is None:
            self._images.pop(item, None)
        else:
            self._images[item] = image
        return image

    def load(self, images: Iterable[Publication]) -> None:
        """A snapshot's images (:meth:`apexmesh.client.robust.RobustClient.snapshot`): each
        replaces its item unless what is held came from the same source later (the
        live flow overtook the snapshot)."""
        for image in images:
            if image.item is None:
                continue
            held = self._images.get(image.item)
            source = str(image.source)
            if held is not None and held.source == source and held.source_seq >= image.source_seq:
                continue
            self._images[image.item] = Image(
                item=image.item,
                fields=fields_of_payload(image.payload),
                source=source,
                source_seq=image.source_seq,
                permtoken=image.permtoken,
            )

    def __getitem__(self, item: str) -> Image:
        return self._images[item]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._images))

    def __len__(self) -> int:
        return len(self._images)


__all__ = ["ItemCache"]
